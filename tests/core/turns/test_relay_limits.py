"""Streamed starts and follow-ups under the hardening rules: text the store refuses, depth,
id lengths and the per-agent limit apply to every frame as to a blocking answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
import msgspec

from a2a_continue.app import create_app
from a2a_continue.limits import MAX_JSON_DEPTH
from a2a_continue.settings import Settings
from tests.support.client import Client, register
from tests.support.servers import serve_asgi
from tests.support.streams import (
    STREAMING,
    frame,
    interrupted_then,
    post_stream,
    snapshot,
    start_task,
    status,
    task_events,
    task_row,
)
from tests.support.waiting import eventually

JSON = dict[str, Any]
Send = Callable[[bytes], Awaitable[None]]


async def test_a_streamed_start_with_nul_is_relayed_unchanged_and_stored_with_stand_ins(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def script(request: JSON, send: Send) -> None:
        await send(frame(request, snapshot("T\x00", "TASK_STATE_WORKING")))
        message = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "a\x00b"}]}
        update = status("T\x00", "TASK_STATE_INPUT_REQUIRED")
        update["statusUpdate"]["status"]["message"] = message
        await send(frame(request, update))

    fake = await sse_agent(script)
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    r = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    assert [e.data.encode() for e in r.events] == fake.sent
    row = await task_row(db, "T\ufffd")
    assert row["state"] == "input-required"
    assert row["status_message"]["parts"] == [{"text": "a\ufffdb"}]
    assert [t for t, *_ in await task_events(db, "T\ufffd")] == ["task_created", "task_updated"]


async def test_a_streamed_follow_up_frame_nested_too_deep_fails_the_follow_up_on_the_record(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Send) -> None:
        deep: Any = "x"
        for _ in range(MAX_JSON_DEPTH + 5):
            deep = [deep]
        update = status("T", "TASK_STATE_COMPLETED", metadata={"k": deep})
        await send(frame(request, update))

    fake = await sse_agent(interrupted_then(rest))
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    await start_task(client, agent)
    r = await post_stream(client, f"/v1/a2a/{agent}/tasks/T/messages", {"text": "x"})
    assert r.status == 502, r.raw
    assert "deeper" in msgspec.json.decode(r.raw)["detail"]
    row = await task_row(db, "T")
    assert (row["state"], row["claim_token"]) == ("input-required", None)
    logged = await task_events(db, "T")
    assert [t for t, *_ in logged] == ["task_created", "task_continue_failed"]


async def test_a_streamed_start_naming_a_task_id_too_long_to_store_is_502(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def script(request: JSON, send: Send) -> None:
        await send(frame(request, snapshot("x" * 501, "TASK_STATE_WORKING")))

    fake = await sse_agent(script)
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    r = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 502, r.raw
    assert "characters" in msgspec.json.decode(r.raw)["detail"]
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 0


async def test_streams_hold_their_agents_slot_and_a_busy_agent_is_503_with_no_claim_left(
    settings: Settings, db: asyncpg.Connection, sse_agent: Any
) -> None:
    release = asyncio.Event()

    async def rest(request: JSON, send: Send) -> None:
        await send(frame(request, status("T", "TASK_STATE_WORKING")))
        await release.wait()
        await send(frame(request, status("T", "TASK_STATE_COMPLETED")))

    fake = await sse_agent(interrupted_then(rest))
    one = msgspec.structs.replace(settings, agent_concurrency=1, agent_timeout_s=30)
    async with serve_asgi(create_app(one)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
        await start_task(client, agent)
        other_task = await db.fetchval("SELECT count(*) FROM a2a_task_events")
        held = asyncio.create_task(
            post_stream(client, f"/v1/a2a/{agent}/tasks/T/messages", {"text": "x"})
        )
        await eventually(lambda: len(fake.received) == 2, "the follow-up at the agent")
        busy_start = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
        release.set()
        done = await asyncio.wait_for(held, 30)
    assert busy_start.status == 503, busy_start.raw
    assert msgspec.json.decode(busy_start.raw)["type"].endswith(":agent-busy")
    assert busy_start.headers["Retry-After"] == "1"
    assert done.status == 200
    assert len(fake.received) == 2
    assert other_task == 1
    assert (await task_row(db, "T"))["claim_token"] is None


async def test_a_streamed_follow_up_to_a_busy_agent_is_503_and_releases_its_claim(
    settings: Settings, db: asyncpg.Connection, sse_agent: Any
) -> None:
    release = asyncio.Event()
    started: list[str] = []

    async def script(request: JSON, send: Send) -> None:
        task_id = request["params"]["message"].get("taskId")
        if task_id is None:
            started.append(f"T{len(started) + 1}")
            await send(frame(request, snapshot(started[-1], "TASK_STATE_INPUT_REQUIRED")))
            return
        await send(frame(request, status(task_id, "TASK_STATE_WORKING")))
        await release.wait()
        await send(frame(request, status(task_id, "TASK_STATE_COMPLETED")))

    fake = await sse_agent(script)
    one = msgspec.structs.replace(settings, agent_concurrency=1, agent_timeout_s=30)
    async with serve_asgi(create_app(one)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
        await start_task(client, agent, "T1")
        await start_task(client, agent, "T2")
        held = asyncio.create_task(
            post_stream(client, f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "x"})
        )
        await eventually(lambda: len(fake.received) == 3, "the follow-up at the agent")
        busy = await post_stream(client, f"/v1/a2a/{agent}/tasks/T2/messages", {"text": "x"})
        release.set()
        await asyncio.wait_for(held, 30)
    assert busy.status == 503, busy.raw
    assert msgspec.json.decode(busy.raw)["type"].endswith(":agent-busy")
    assert len(fake.received) == 3
    assert (await task_row(db, "T2"))["claim_token"] is None
    assert [t for t, *_ in await task_events(db, "T2")] == ["task_created"]
