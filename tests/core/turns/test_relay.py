"""Streaming a start or a follow-up (§8.2), against real a2a-sdk agents and scripted fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest

from a2a_continue.a2a.agent_stream import SseReader
from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.agents import BUSY_TYPE
from tests.support.client import Client, Response, register, token
from tests.support.database import TASKS_WITH_CLAIMS
from tests.support.sdk_agent import run_sdk_agent
from tests.support.servers import serve_asgi
from tests.support.sse_client import events
from tests.support.streams import (
    STREAM,
    STREAMING,
    frame,
    interrupted_then,
    post_stream,
    snapshot,
    start_task,
    status,
    task_events,
    task_of,
    task_row,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
TIMEOUT_TYPE = "urn:a2a-continue:problem:agent-timeout"


def agent_frames(answer: bytes) -> list[bytes]:
    """The data of each event an agent sent."""
    reader = SseReader(1 << 24)
    frames = reader.feed(answer)
    last = reader.close()
    return frames + ([last] if last is not None else [])


def without_message_ids(entries: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [
        (kind, prev, new, {k: v for k, v in data.items() if k != "messageId"})
        for kind, prev, new, data in entries
    ]


# ---- real a2a-sdk agents ------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_streamed_start_relays_the_sdk_agents_frames_and_records_them(
    client: Client, db: asyncpg.Connection, version: str
) -> None:
    async with run_sdk_agent(streaming=True) as sdk:
        agent = await register(client, sdk.url, version, capabilities=STREAMING)
        r = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    assert (
        sdk.received[0]["method"]
        == {"1.0": "SendStreamingMessage", "0.3": "message/stream"}[version]
    )
    assert [e.data.encode() for e in r.events] == agent_frames(sdk.answers[0])
    assert [e.event for e in r.events] == [
        "task",
        "status-update",
        "artifact-update",
        "artifact-update",
        "status-update",
    ]
    task_id = task_of(r.events[0])
    row = await task_row(db, task_id)
    assert row["state"] == "input-required"
    assert row["status_message"]["parts"][0]["text"] == "Which city?"
    assert [a["artifactId"] for a in row["artifacts"]] == ["draft"]
    assert [p["text"] for p in row["artifacts"][0]["parts"]] == ["Looking ", "for a city"]
    assert without_message_ids(await task_events(db, task_id)) == [
        ("task_created", None, "submitted", {}),
        ("task_updated", "submitted", "working", {"source": "stream"}),
        ("task_updated", "working", "working", {"source": "stream", "artifactIds": ["draft"]}),
        ("task_updated", "working", "working", {"source": "stream", "artifactIds": ["draft"]}),
        ("task_updated", "working", "input-required", {"source": "stream"}),
    ]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_streamed_follow_up_relays_the_sdk_agents_frames_and_records_them(
    client: Client, db: asyncpg.Connection, version: str
) -> None:
    async with run_sdk_agent(streaming=True) as sdk:
        agent = await register(client, sdk.url, version, capabilities=STREAMING)
        started = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
        task_id = task_of(started.events[0])
        r = await post_stream(
            client, f"/v1/a2a/{agent}/tasks/{task_id}/messages", {"text": "Paris"}
        )
    assert r.status == 200
    assert [e.data.encode() for e in r.events] == agent_frames(sdk.answers[1])
    assert [e.event for e in r.events] == ["status-update", "artifact-update", "status-update"]
    sent = sdk.received[1]["params"]["message"]
    assert (sent["taskId"], sent["role"]) == (task_id, {"1.0": "ROLE_USER", "0.3": "user"}[version])
    row = await task_row(db, task_id)
    assert (row["state"], row["claim_token"]) == ("completed", None)
    forecast = row["artifacts"][-1]
    assert (forecast["artifactId"], forecast["parts"][0]["text"]) == ("forecast", "Sunny in Paris")
    logged = await task_events(db, task_id)
    assert without_message_ids(logged[5:]) == [
        ("task_continued", "input-required", "working", {"source": "stream"}),
        ("task_updated", "working", "working", {"source": "stream", "artifactIds": ["forecast"]}),
        ("task_updated", "working", "completed", {"source": "stream"}),
    ]
    assert logged[5][3]["messageId"] == sent["messageId"]


async def test_an_agent_without_streaming_gets_the_blocking_send_and_the_caller_one_event(
    client: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent() as sdk:
        agent = await register(client, sdk.url, "1.0")
        r = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
        task_id = task_of(r.events[0])
        follow = await post_stream(
            client, f"/v1/a2a/{agent}/tasks/{task_id}/messages", {"text": "Paris"}
        )
    assert [body["method"] for body in sdk.received] == ["SendMessage", "SendMessage"]
    assert [e.event for e in r.events] == ["task"]
    assert r.events[0].data.encode() == sdk.answers[0]
    assert r.headers["A2A-Task-State"] == "input-required"
    assert [e.event for e in follow.events] == ["task"]
    assert follow.headers["A2A-Task-State"] == "completed"
    assert [t for t, *_ in await task_events(db, task_id)] == ["task_created", "task_continued"]


# ---- a scripted streaming agent -----------------------------------------------------------


def artifact(task_id: str, artifact_id: str, text: str, append: bool = False) -> JSON:
    chunk = {"artifactId": artifact_id, "parts": [{"text": text}]}
    return {"artifactUpdate": {"taskId": task_id, "artifact": chunk, "append": append}}


async def test_frames_are_relayed_byte_for_byte_and_a_first_snapshot_does_not_end_the_stream(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, snapshot("T", "TASK_STATE_INPUT_REQUIRED")))
        await send(frame(request, artifact("T", "a1", "Sunny")))
        await send(frame(request, artifact("T", "a1", " in Paris", append=True)))
        await send(frame(request, status("T", "TASK_STATE_COMPLETED")))
        await send(frame(request, status("T", "TASK_STATE_WORKING")))  # after the end: not read

    fake = await sse_agent(interrupted_then(rest))
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    await start_task(client, agent)
    r = await post_stream(client, f"/v1/a2a/{agent}/tasks/T/messages", {"text": "Paris"})
    assert [e.data.encode() for e in r.events] == fake.sent[1:5]
    assert [e.event for e in r.events] == [
        "task",
        "artifact-update",
        "artifact-update",
        "status-update",
    ]
    row = await task_row(db, "T")
    assert row["state"] == "completed"
    assert row["artifacts"] == [
        {"artifactId": "a1", "parts": [{"text": "Sunny"}, {"text": " in Paris"}]}
    ]
    assert [(t, p, n) for t, p, n, _ in await task_events(db, "T")] == [
        ("task_created", None, "input-required"),
        ("task_continued", "input-required", "input-required"),
        ("task_updated", "input-required", "input-required"),
        ("task_updated", "input-required", "input-required"),
        ("task_updated", "input-required", "completed"),
    ]


async def test_a_v03_stream_ends_only_at_a_final_status_update(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    def v03(task_id: str, state: str, final: bool) -> JSON:
        return {
            "kind": "status-update",
            "taskId": task_id,
            "contextId": "C",
            "status": {"state": state},
            "final": final,
        }

    async def script(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, {"kind": "task", "id": "T", "status": {"state": "submitted"}}))
        await send(frame(request, v03("T", "input-required", False)))
        await send(frame(request, v03("T", "working", False)))
        await send(frame(request, v03("T", "input-required", True)))
        await send(frame(request, v03("T", "working", False)))

    fake = await sse_agent(script)
    agent = await register(client, fake.url, "0.3", capabilities=STREAMING)
    r = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert fake.received[0]["method"] == "message/stream"
    assert [e.data.encode() for e in r.events] == fake.sent[:4]
    assert (await task_row(db, "T"))["state"] == "input-required"


async def test_a_second_follow_up_during_a_stream_gets_409_task_busy(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    gate = asyncio.Event()

    async def rest(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, status("T", "TASK_STATE_WORKING")))
        await gate.wait()
        await send(frame(request, status("T", "TASK_STATE_COMPLETED")))

    fake = await sse_agent(interrupted_then(rest))
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    await start_task(client, agent)
    path = f"/v1/a2a/{agent}/tasks/T/messages"
    headers = {"Authorization": f"Bearer {client.bearer}", **STREAM}
    async with client.session.post(client.base + path, json={"text": "a"}, headers=headers) as r:
        received = events(r)
        assert (await anext(received)).event == "status-update"
        streamed = await post_stream(client, path, {"text": "b"})
        blocking = await client.call("POST", path, {"text": "c"})
        gate.set()
        assert [e.event async for e in received] == ["status-update"]
    for refused in (Response(streamed.status, streamed.headers, streamed.raw), blocking):
        assert refused.status == 409
        assert refused.json()["type"] == BUSY_TYPE
    assert len(fake.received) == 2
    assert (await task_row(db, "T"))["state"] == "completed"


async def test_a_caller_that_disconnects_mid_stream_still_leaves_the_end_state_recorded(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    gate = asyncio.Event()

    async def rest(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, status("T", "TASK_STATE_WORKING")))
        await gate.wait()
        await send(frame(request, artifact("T", "a1", "Sunny in Paris")))
        await send(frame(request, status("T", "TASK_STATE_COMPLETED")))

    fake = await sse_agent(interrupted_then(rest))
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    await start_task(client, agent)
    headers = {"Authorization": f"Bearer {client.bearer}", **STREAM}
    async with aiohttp.ClientSession() as own:
        path = client.base + f"/v1/a2a/{agent}/tasks/T/messages"
        async with own.post(path, json={"text": "Paris"}, headers=headers) as r:
            assert (await anext(events(r))).event == "status-update"
    gate.set()

    async def recorded() -> bool:
        row = await task_row(db, "T")
        return row["state"] == "completed" and row["claim_token"] is None

    await eventually(recorded)
    assert (await task_row(db, "T"))["artifacts"][0]["artifactId"] == "a1"
    assert [t for t, *_ in await task_events(db, "T")][-1] == "task_updated"


async def test_an_idle_agent_ends_the_stream_with_an_error_event_and_a_failed_follow_up(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, status("T", "TASK_STATE_WORKING")))
        await asyncio.sleep(1)

    fake = await sse_agent(interrupted_then(rest))
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING, timeoutSeconds=0.3)
    await start_task(client, agent)
    r = await post_stream(client, f"/v1/a2a/{agent}/tasks/T/messages", {"text": "Paris"})
    assert [e.event for e in r.events] == ["status-update", "error"]
    problem = r.events[1].json()
    assert (problem["type"], problem["status"]) == (TIMEOUT_TYPE, 504)
    row = await task_row(db, "T")
    assert (row["state"], row["claim_token"]) == ("working", None)
    last = (await task_events(db, "T"))[-1]
    assert (last[0], last[3]["reason"]) == ("task_continue_failed", "agent-timeout")


async def test_an_agent_silent_before_any_frame_gets_a_504_problem(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await asyncio.sleep(1)

    fake = await sse_agent(interrupted_then(rest))
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING, timeoutSeconds=0.3)
    await start_task(client, agent)
    r = await post_stream(client, f"/v1/a2a/{agent}/tasks/T/messages", {"text": "Paris"})
    assert r.status == 504
    assert r.headers["Content-Type"] == "application/problem+json"
    assert msgspec.json.decode(r.raw)["type"] == TIMEOUT_TYPE
    row = await task_row(db, "T")
    assert (row["state"], row["claim_token"]) == ("input-required", None)
    assert (await task_events(db, "T"))[-1][0] == "task_continue_failed"


async def test_a_broken_stream_leaves_the_task_live_and_releases_the_claim(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, status("T", "TASK_STATE_WORKING")))
        await send(b"not json")

    fake = await sse_agent(interrupted_then(rest))
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    await start_task(client, agent)
    r = await post_stream(client, f"/v1/a2a/{agent}/tasks/T/messages", {"text": "Paris"})
    assert [e.event for e in r.events] == ["status-update", "error"]
    assert r.events[1].json()["status"] == 502
    row = await task_row(db, "T")
    assert (row["state"], row["claim_token"]) == ("working", None)


async def test_a_stream_longer_than_the_limit_is_ended(
    settings: Settings, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def script(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, snapshot("T", "TASK_STATE_WORKING")))
        for _ in range(40):
            await asyncio.sleep(0.05)
            await send(frame(request, artifact("T", "a1", ".", append=True)))

    fake = await sse_agent(script)
    short = msgspec.structs.replace(settings, stream_max_s=0.5)
    async with serve_asgi(create_app(short)) as base, aiohttp.ClientSession() as http:
        client = Client(base, http)
        agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
        r = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.events[-1].event == "error"
    assert "longer than 0.5 s" in r.events[-1].json()["detail"]
    # The task is left working: the watcher may have recorded more of it since.
    assert "task_continue_failed" in [e[0] for e in await task_events(db, "T")]


async def test_a_streamed_start_answered_with_a_message_stores_no_task(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def script(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(
            frame(
                request,
                {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hello"}]}},
            )
        )

    fake = await sse_agent(script)
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    r = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert [e.event for e in r.events] == ["message"]
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 0


# ---- refusals before any stream -----------------------------------------------------------


async def test_a_streamed_follow_up_is_refused_like_a_blocking_one_before_any_agent_call(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, status("T", "TASK_STATE_COMPLETED")))

    fake = await sse_agent(interrupted_then(rest))
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    await start_task(client, agent)
    path = f"/v1/a2a/{agent}/tasks/T/messages"
    cases = [
        ({"text": "x", "message": {"parts": [{"text": "y"}]}}, 422),
        ({"message": {"role": "agent", "parts": [{"text": "y"}]}}, 400),
        ({"message": {"taskId": "other", "parts": [{"text": "y"}]}}, 400),
        ({"message": {"contextId": "other", "parts": [{"text": "y"}]}}, 400),
    ]
    for body, expected in cases:
        r = await post_stream(client, path, body)
        assert (r.status, r.headers["Content-Type"]) == (expected, "application/problem+json")
    assert (
        await post_stream(client, f"/v1/a2a/{agent}/tasks/nope/messages", {"text": "x"})
    ).status == 404
    done = await post_stream(client, path, {"text": "Paris"})
    assert done.events[-1].event == "status-update"
    terminal = await post_stream(client, path, {"text": "again"})
    assert terminal.status == 409
    assert msgspec.json.decode(terminal.raw)["state"] == "completed"
    assert len(fake.received) == 2


async def test_a_streamed_start_of_an_invisible_agent_is_404(
    client: Client, sse_agent: Any
) -> None:
    async def script(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, snapshot("T", "TASK_STATE_WORKING")))

    fake = await sse_agent(script)
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    bob = client.as_(token("bob@example.com"))
    r = await post_stream(bob, f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 404
    assert fake.received == []


# ---- capabilities -------------------------------------------------------------------------


async def test_capabilities_default_to_no_streaming_and_can_be_set_and_changed(
    client: Client,
) -> None:
    body = {"name": "w", "endpointUrl": "http://127.0.0.1:9/", "protocolVersion": "1.0"}
    r = await client.call("POST", "/v1/a2a/agents", body)
    assert r.json()["capabilities"] == {"streaming": False, "pushNotifications": False}
    agent = r.json()["id"]
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent}", {"capabilities": {"streaming": True}})
    assert r.json()["capabilities"] == {"streaming": True, "pushNotifications": False}
    r = await client.call("GET", f"/v1/a2a/agents/{agent}")
    assert r.json()["capabilities"]["streaming"] is True
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent}", {"name": "x"})
    assert r.json()["capabilities"]["streaming"] is True


@pytest.mark.parametrize("capabilities", [{"streaming": "yes"}, {"other": True}, []])
async def test_invalid_capabilities_are_422(client: Client, capabilities: Any) -> None:
    body = {
        "name": "w",
        "endpointUrl": "http://127.0.0.1:9/",
        "protocolVersion": "1.0",
        "capabilities": capabilities,
    }
    r = await client.call("POST", "/v1/a2a/agents", body)
    assert r.status == 422
    assert r.json()["errors"][0]["loc"].startswith("$.capabilities")


async def test_shutting_the_gateway_down_releases_the_claim_of_a_stream_still_being_read(
    settings: Settings, db: asyncpg.Connection, sse_agent: Any
) -> None:
    gate = asyncio.Event()

    async def rest(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, status("T", "TASK_STATE_WORKING")))
        await gate.wait()

    fake = await sse_agent(interrupted_then(rest))
    async with serve_asgi(create_app(settings)) as base, aiohttp.ClientSession() as http:
        client = Client(base, http)
        agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
        await start_task(client, agent)
        headers = {"Authorization": f"Bearer {client.bearer}", **STREAM}
        path = f"{base}/v1/a2a/{agent}/tasks/T/messages"
        async with http.post(path, json={"text": "Paris"}, headers=headers) as r:
            assert (await anext(events(r))).event == "status-update"
        assert (await task_row(db, "T"))["claim_token"] is not None
    gate.set()
    row = await task_row(db, "T")
    assert (row["state"], row["claim_token"]) == ("working", None)


async def test_the_claim_is_renewed_while_a_stream_outlives_its_lifetime(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    # Agent timeout 0.5 s + claim margin 1 s: an unrenewed claim would expire after 1.5 s.
    gate = asyncio.Event()

    async def rest(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        await send(frame(request, status("T", "TASK_STATE_WORKING")))
        while not gate.is_set():
            await asyncio.sleep(0.2)
            await send(frame(request, artifact("T", "a1", ".", append=True)))
        await send(frame(request, status("T", "TASK_STATE_COMPLETED")))

    fake = await sse_agent(interrupted_then(rest))
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING, timeoutSeconds=0.5)
    await start_task(client, agent)
    path = f"/v1/a2a/{agent}/tasks/T/messages"
    headers = {"Authorization": f"Bearer {client.bearer}", **STREAM}
    async with client.session.post(client.base + path, json={"text": "a"}, headers=headers) as r:
        received = events(r)
        await anext(received)
        expiry = await db.fetchval(
            f"SELECT expires_at FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T'"
        )
        await asyncio.sleep(2.5)
        renewed = await db.fetchval(
            f"SELECT expires_at FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T'"
        )
        busy = await client.call("POST", path, {"text": "b"})
        gate.set()
        assert [e.event async for e in received][-1] == "status-update"
    assert renewed > expiry
    assert busy.status == 409
    assert busy.json()["type"] == BUSY_TYPE
    assert (await task_row(db, "T"))["claim_token"] is None
