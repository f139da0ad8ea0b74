"""Reading an agent's event stream: frames as sent, limits, timeouts, credentials."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from a2a_continue.a2a import answers
from a2a_continue.a2a.agent_stream import Frame, SseReader, stream_rpc
from a2a_continue.a2a.answers import ARTIFACT, STATUS, TASK
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.errors import AgentBadAnswer, AgentTimeout, AgentUnreachable
from tests.support.ports import dead_url
from tests.support.rpc import message_v03, message_v10
from tests.support.sdk_agent import run_sdk_agent
from tests.support.servers import serve_aiohttp

PAYLOAD = {"jsonrpc": "2.0", "id": "r1", "method": "SendStreamingMessage", "params": {}}
FIRST = (
    b'{"jsonrpc":"2.0","id":"r1",'
    b'"result":{"task":{"id":"T","status":{"state":"TASK_STATE_WORKING"}}}}'
)
SECOND = b'{ "jsonrpc": "2.0", "id": "r1",  "result": {"statusUpdate": {"taskId": "T"}} }'

Script = Callable[[web.StreamResponse], Awaitable[None]]


@pytest.fixture
async def agent() -> AsyncIterator[Callable[[Script], Awaitable[tuple[str, list[Any]]]]]:
    """Start an agent whose SSE body a script writes; return its URL and request headers."""
    async with asyncio.timeout(60):
        servers: list[Any] = []

        async def start(script: Script) -> tuple[str, list[Any]]:
            seen: list[Any] = []

            async def endpoint(request: web.Request) -> web.StreamResponse:
                seen.append(dict(request.headers))
                response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await response.prepare(request)
                await script(response)
                return response

            app = web.Application()
            app.router.add_post("/", endpoint)
            server = serve_aiohttp(app)
            servers.append(server)
            return await server.__aenter__() + "/", seen

        try:
            yield start
        finally:
            for server in servers:
                await server.__aexit__(None, None, None)


def target(url: str, timeout_s: float = 5.0, auth: dict[str, Any] | None = None) -> AgentTarget:
    return AgentTarget(endpoint_url=url, protocol_version="1.0", timeout_s=timeout_s, auth=auth)


async def collect(
    session: aiohttp.ClientSession, to: AgentTarget, max_bytes: int = 1 << 20
) -> list[Frame]:
    return [frame async for frame in stream_rpc(session, to, PAYLOAD, max_bytes)]


async def test_each_data_event_is_yielded_with_the_agents_exact_bytes(
    session: aiohttp.ClientSession, agent: Any
) -> None:
    async def script(response: web.StreamResponse) -> None:
        await response.write(b"event: task\r\ndata: " + FIRST + b"\r\n\r\n")
        await response.write(b": a comment\n\ndata: " + SECOND[:20])
        await response.write(SECOND[20:] + b"\n\n")

    url, _ = await agent(script)
    frames = await collect(session, target(url))
    assert [f.raw for f in frames] == [FIRST, SECOND]
    assert frames[1].body["result"] == {"statusUpdate": {"taskId": "T"}}


async def test_multi_line_data_is_joined_and_a_last_event_without_blank_line_counts(
    session: aiohttp.ClientSession, agent: Any
) -> None:
    async def script(response: web.StreamResponse) -> None:
        await response.write(b'data: {"jsonrpc": "2.0",\ndata: "id": "r1", "result": {}}\n\n')
        await response.write(b"data: " + FIRST)

    url, _ = await agent(script)
    frames = await collect(session, target(url))
    assert frames[0].raw == b'{"jsonrpc": "2.0",\n"id": "r1", "result": {}}'
    assert frames[1].raw == FIRST


async def test_the_request_carries_the_version_the_accept_header_and_the_credentials(
    session: aiohttp.ClientSession, agent: Any
) -> None:
    async def script(response: web.StreamResponse) -> None:
        await response.write(b"data: " + FIRST + b"\n\n")

    url, seen = await agent(script)
    await collect(session, target(url, auth={"type": "bearer", "token": "s3cret"}))
    assert seen[0]["A2A-Version"] == "1.0"
    assert seen[0]["Accept"] == "text/event-stream"
    assert seen[0]["Authorization"] == "Bearer s3cret"


async def test_a_plain_json_answer_is_one_frame(
    session: aiohttp.ClientSession, fake_agent: Any
) -> None:
    error = b'{"jsonrpc":"2.0","id":"r1","error":{"code":-32004,"message":"no streaming"}}'

    async def handler(body: dict[str, Any]) -> bytes:
        return error

    fake = await fake_agent(handler)
    frames = await collect(session, target(fake.url))
    assert [f.raw for f in frames] == [error]


async def test_a_silence_longer_than_the_agent_timeout_is_a_timeout(
    session: aiohttp.ClientSession, agent: Any
) -> None:
    async def script(response: web.StreamResponse) -> None:
        await response.write(b"data: " + FIRST + b"\n\n")
        await asyncio.sleep(1)

    url, _ = await agent(script)
    got: list[bytes] = []
    with pytest.raises(AgentTimeout, match="silent"):
        async for frame in stream_rpc(session, target(url, timeout_s=0.3), PAYLOAD, 1 << 20):
            got.append(frame.raw)
    assert got == [FIRST]


async def test_keep_alive_comments_do_not_count_as_silence(
    session: aiohttp.ClientSession, agent: Any
) -> None:
    async def script(response: web.StreamResponse) -> None:
        for _ in range(4):
            await asyncio.sleep(0.15)
            await response.write(b": keep-alive\n\n")
        await response.write(b"data: " + FIRST + b"\n\n")

    url, _ = await agent(script)
    frames = await collect(session, target(url, timeout_s=0.5))
    assert [f.raw for f in frames] == [FIRST]


async def test_a_frame_over_the_size_limit_is_refused(
    session: aiohttp.ClientSession, agent: Any
) -> None:
    async def script(response: web.StreamResponse) -> None:
        await response.write(b"data: " + b"x" * 5000 + b"\n\n")

    url, _ = await agent(script)
    with pytest.raises(AgentBadAnswer, match="larger than 1000 bytes"):
        await collect(session, target(url), max_bytes=1000)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON-RPC object"),
        (b'{"jsonrpc":"2.0","id":"other","result":{}}', "another JSON-RPC id"),
    ],
)
async def test_frames_that_are_not_our_json_rpc_answers_are_refused(
    session: aiohttp.ClientSession, agent: Any, data: bytes, match: str
) -> None:
    async def script(response: web.StreamResponse) -> None:
        await response.write(b"data: " + data + b"\n\n")

    url, _ = await agent(script)
    with pytest.raises(AgentBadAnswer, match=match):
        await collect(session, target(url))


async def test_a_non_2xx_answer_is_a_bad_answer(
    session: aiohttp.ClientSession, fake_agent: Any
) -> None:
    async def handler(body: dict[str, Any]) -> web.Response:
        return web.Response(status=500, text="boom")

    fake = await fake_agent(handler)
    with pytest.raises(AgentBadAnswer, match="HTTP 500"):
        await collect(session, target(fake.url))


async def test_an_agent_nobody_listens_on_is_unreachable(session: aiohttp.ClientSession) -> None:
    with pytest.raises(AgentUnreachable):
        await collect(session, target(dead_url()))


def test_the_reader_splits_events_on_any_line_ending() -> None:
    reader = SseReader(1000)
    assert reader.feed(b"data: a\r\n\r\ndata: b\n") == [b"a"]
    assert reader.feed(b"\nid: 3\nevent: x\ndata:c\n\n") == [b"b", b"c"]
    assert reader.close() is None


@pytest.mark.parametrize(
    ("version", "method", "params"),
    [
        ("1.0", "SendStreamingMessage", message_v10("hi")),
        ("0.3", "message/stream", message_v03("hi")),
    ],
)
async def test_a_real_sdk_agents_stream_reads_as_task_then_updates(
    session: aiohttp.ClientSession, version: str, method: str, params: dict[str, Any]
) -> None:
    payload = {"jsonrpc": "2.0", "id": "r1", "method": method, "params": params}
    async with run_sdk_agent(streaming=True) as sdk:
        to = AgentTarget(endpoint_url=sdk.url, protocol_version=version, timeout_s=5)
        frames = [f async for f in stream_rpc(session, to, payload, 1 << 20)]
    updates = [answers.read(f.body, version, frame=True) for f in frames]
    assert [u.kind for u in updates] == [TASK, STATUS, ARTIFACT, ARTIFACT, STATUS]
    assert [u.state for u in updates] == ["submitted", "working", None, None, "input-required"]
    assert [c.append for u in updates[2:4] for c in u.artifacts] == [False, True]
    assert sdk.headers[0]["a2a-version"] == version
