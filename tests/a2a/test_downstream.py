"""The outbound JSON-RPC call to an agent: headers, credentials, size cap, id check, failures."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from a2a_continue.a2a.downstream import AgentReply, AgentTarget, post_rpc
from a2a_continue.errors import AgentBadAnswer, AgentTimeout, AgentUnreachable
from tests.support.fakes import Handler, StartFake
from tests.support.ports import dead_url

JSON = dict[str, Any]

CAP = 4096
PAYLOAD: JSON = {"jsonrpc": "2.0", "id": "rpc-1", "method": "CancelTask", "params": {"id": "t"}}


def target(url: str, version: str = "1.0", auth: JSON | None = None) -> AgentTarget:
    return AgentTarget(endpoint_url=url, protocol_version=version, timeout_s=5.0, auth=auth)


async def call(session: aiohttp.ClientSession, agent: AgentTarget) -> AgentReply:
    return await post_rpc(session, agent, PAYLOAD, CAP)


def answer_of(request: JSON, size: int = 0) -> bytes:
    """A JSON-RPC answer to ``request`` of exactly ``size`` bytes (when size is given)."""
    head = b'{"jsonrpc":"2.0","id":' + msgspec.json.encode(request["id"]) + b',"result":{"pad":"'
    tail = b'"}}'
    return head + b"x" * max(0, size - len(head) - len(tail)) + tail


async def echo(request: JSON) -> bytes:
    return answer_of(request)


# ---- what is sent ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_post_rpc_posts_json_with_the_protocol_version_header(
    session: aiohttp.ClientSession, fake_agent: StartFake, version: str
) -> None:
    agent = await fake_agent(echo)
    await call(session, target(agent.url, version))
    assert agent.received == [PAYLOAD]
    assert agent.headers[0]["Content-Type"] == "application/json"
    assert agent.headers[0]["A2A-Version"] == version
    assert "Authorization" not in agent.headers[0]


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        ({"type": "bearer", "token": "s3cret"}, {"Authorization": "Bearer s3cret"}),
        (
            {"type": "basic", "username": "ann", "password": "pw:1"},
            {"Authorization": "Basic " + base64.b64encode(b"ann:pw:1").decode()},
        ),
        ({"type": "headers", "headers": {"X-Api-Key": "k-1"}}, {"X-Api-Key": "k-1"}),
    ],
    ids=["bearer", "basic", "headers"],
)
async def test_post_rpc_sends_the_agents_credentials(
    session: aiohttp.ClientSession, fake_agent: StartFake, auth: JSON, expected: dict[str, str]
) -> None:
    agent = await fake_agent(echo)
    await call(session, target(agent.url, auth=auth))
    assert {k: agent.headers[0].get(k) for k in expected} == expected


async def test_post_rpc_does_not_follow_a_redirect(
    session: aiohttp.ClientSession, fake_agent: StartFake
) -> None:
    elsewhere = await fake_agent(echo)

    async def redirect(request: JSON) -> web.Response:
        return web.Response(status=307, headers={"Location": elsewhere.url})

    agent = await fake_agent(redirect)
    with pytest.raises(AgentBadAnswer, match="HTTP 307"):
        await call(session, target(agent.url, auth={"type": "bearer", "token": "s3cret"}))
    assert elsewhere.received == []


# ---- what comes back ---------------------------------------------------------------------------


async def test_post_rpc_returns_the_exact_bytes_and_their_json(
    session: aiohttp.ClientSession, fake_agent: StartFake
) -> None:
    raw = b'{ "id": "rpc-1",\n  "result": {"kind": "task"}, "jsonrpc": "2.0" }'

    async def spaced(request: JSON) -> bytes:
        return raw

    reply = await call(session, target((await fake_agent(spaced)).url))
    assert reply.raw == raw
    assert reply.body == {"id": "rpc-1", "result": {"kind": "task"}, "jsonrpc": "2.0"}


async def test_post_rpc_accepts_an_answer_of_exactly_the_cap(
    session: aiohttp.ClientSession, fake_agent: StartFake
) -> None:
    async def full(request: JSON) -> bytes:
        return answer_of(request, CAP)

    reply = await call(session, target((await fake_agent(full)).url))
    assert len(reply.raw) == CAP


async def test_post_rpc_refuses_an_answer_over_the_cap(
    session: aiohttp.ClientSession, fake_agent: StartFake
) -> None:
    async def over(request: JSON) -> bytes:
        return answer_of(request, CAP + 1)

    with pytest.raises(AgentBadAnswer, match=f"larger than {CAP} bytes"):
        await call(session, target((await fake_agent(over)).url))


async def test_post_rpc_refuses_a_chunked_answer_over_the_cap(
    session: aiohttp.ClientSession, fake_agent: StartFake
) -> None:
    async def chunked(request: JSON) -> web.Response:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(CAP // 1000 + 2):
                yield b" " * 1000  # JSON whitespace: valid until the cap is passed

        response = web.Response(body=chunks(), content_type="application/json")
        response.enable_chunked_encoding()  # no Content-Length announces the size
        return response

    with pytest.raises(AgentBadAnswer, match=f"larger than {CAP} bytes"):
        await call(session, target((await fake_agent(chunked)).url))


async def _wrong_id(request: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": "rpc-2", "result": {}}


async def _null_id_result(request: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": None, "result": {}}


async def _no_id(request: JSON) -> JSON:
    return {"jsonrpc": "2.0", "result": {}}


@pytest.mark.parametrize(
    "handler",
    [
        pytest.param(_wrong_id, id="another-id"),
        pytest.param(_null_id_result, id="null-id-with-result"),
        pytest.param(_no_id, id="no-id"),
    ],
)
async def test_post_rpc_refuses_an_answer_to_another_request(
    session: aiohttp.ClientSession, fake_agent: StartFake, handler: Handler
) -> None:
    with pytest.raises(AgentBadAnswer, match="another JSON-RPC id"):
        await call(session, target((await fake_agent(handler)).url))


async def test_post_rpc_accepts_an_error_with_a_null_id(
    session: aiohttp.ClientSession, fake_agent: StartFake
) -> None:
    # JSON-RPC 2.0: an agent that could not read the request id answers its error with id null.
    async def parse_error(request: JSON) -> JSON:
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}

    reply = await call(session, target((await fake_agent(parse_error)).url))
    assert reply.body["error"]["code"] == -32700


@pytest.mark.parametrize("status", [400, 404, 500, 503])
async def test_post_rpc_refuses_a_non_2xx_answer(
    session: aiohttp.ClientSession, fake_agent: StartFake, status: int
) -> None:
    async def failing(request: JSON) -> web.Response:
        return web.Response(body=answer_of(request), status=status, content_type="application/json")

    with pytest.raises(AgentBadAnswer, match=f"HTTP {status}"):
        await call(session, target((await fake_agent(failing)).url))


@pytest.mark.parametrize(
    ("raw", "match"),
    [(b"<html>busy</html>", "not JSON"), (b"", "not JSON"), (b'["rpc-1"]', "not a JSON-RPC")],
    ids=["html", "empty", "array"],
)
async def test_post_rpc_refuses_an_answer_that_is_not_a_json_object(
    session: aiohttp.ClientSession, fake_agent: StartFake, raw: bytes, match: str
) -> None:
    async def handler(request: JSON) -> bytes:
        return raw

    with pytest.raises(AgentBadAnswer, match=match):
        await call(session, target((await fake_agent(handler)).url))


# ---- failures to reach the agent ---------------------------------------------------------------


async def test_post_rpc_to_an_unreachable_agent_raises_unreachable(
    session: aiohttp.ClientSession,
) -> None:
    with pytest.raises(AgentUnreachable):
        await call(session, target(dead_url()))


async def test_post_rpc_past_the_agents_timeout_raises_timeout(
    session: aiohttp.ClientSession, fake_agent: StartFake
) -> None:
    release = asyncio.Event()

    async def stall(request: JSON) -> bytes:
        await asyncio.wait_for(release.wait(), 5)
        return answer_of(request)

    agent = await fake_agent(stall)
    slow = AgentTarget(endpoint_url=agent.url, protocol_version="1.0", timeout_s=0.2)
    try:
        with pytest.raises(AgentTimeout, match=r"0\.2 s"):
            await call(session, slow)
    finally:
        release.set()
