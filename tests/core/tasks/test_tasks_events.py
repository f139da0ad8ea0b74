"""A task's event log: reading it with after/limit, and appending to it concurrently."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest

from a2a_continue.core.tasks.store import append_event
from tests.support.client import Client
from tests.support.database import statement_cache
from tests.support.fakes import StartFake

JSON = dict[str, Any]

WRITERS = 50
EVENT_FIELDS = {"seq", "type", "previousState", "newState", "actor", "data", "createdAt"}


async def starts_task(request: JSON) -> JSON:
    task = {"id": "task-1", "contextId": "ctx-1", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"task": task}}


@pytest.fixture
async def events_path(client: Client, db: asyncpg.Connection, fake_agent: StartFake) -> str:
    """The events route of a task with five events: task_created, then four follow-ups."""
    url = (await fake_agent(starts_task)).url
    body = {"name": "weather", "endpointUrl": url, "protocolVersion": "1.0"}
    agent = (await client.call("POST", "/v1/a2a/agents", body)).json()["id"]
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "weather?"})
    assert r.status == 200, r.raw
    row_id = await db.fetchval("SELECT id FROM a2a_tasks")
    for n in range(2, 6):
        state = "input-required"
        await append_event(db, row_id, "task_continued", state, state, "bob", {"n": n})
    return f"/v1/a2a/{agent}/tasks/task-1/events"


async def page(client: Client, path: str) -> tuple[list[int], int]:
    r = await client.call("GET", path)
    assert r.status == 200, r.raw
    body = r.json()
    return [e["seq"] for e in body["events"]], body["nextAfter"]


# ---- reading ------------------------------------------------------------------------------------


async def test_events_are_listed_ascending_from_seq_1(client: Client, events_path: str) -> None:
    r = await client.call("GET", events_path)
    assert r.status == 200, r.raw
    events = r.json()["events"]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    assert all(set(e) == EVENT_FIELDS for e in events)
    assert (events[0]["type"], events[0]["newState"], events[0]["actor"]) == (
        "task_created",
        "input-required",
        "alice@example.com",
    )
    assert (events[4]["type"], events[4]["actor"], events[4]["data"]) == (
        "task_continued",
        "bob",
        {"n": 5},
    )
    assert r.json()["nextAfter"] == 5


async def test_events_after_n_start_past_n(client: Client, events_path: str) -> None:
    assert await page(client, events_path + "?after=2") == ([3, 4, 5], 5)


async def test_events_limit_cuts_the_page_and_next_after_is_its_last_seq(
    client: Client, events_path: str
) -> None:
    assert await page(client, events_path + "?after=1&limit=2") == ([2, 3], 3)
    assert await page(client, events_path + "?after=3&limit=2") == ([4, 5], 5)


async def test_events_past_the_last_give_next_after_equal_to_after(
    client: Client, events_path: str
) -> None:
    assert await page(client, events_path + "?after=5") == ([], 5)
    assert await page(client, events_path + "?after=40&limit=3") == ([], 40)


@pytest.mark.parametrize(
    ("query", "loc"),
    [
        ("after=-1", "$.query.after"),
        ("after=two", "$.query.after"),
        ("limit=0", "$.query.limit"),
        ("limit=many", "$.query.limit"),
    ],
)
async def test_events_reject_a_bad_after_or_limit(
    client: Client, events_path: str, query: str, loc: str
) -> None:
    r = await client.call("GET", f"{events_path}?{query}")
    assert r.status == 422, r.raw
    assert r.json()["errors"][0]["loc"] == loc


# ---- appending ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def connections(url: str, count: int) -> AsyncIterator[list[asyncpg.Connection]]:
    """Open ``count`` separate connections that encode jsonb as the service does."""
    opened = await asyncio.gather(
        *(asyncpg.connect(url, statement_cache_size=statement_cache()) for _ in range(count))
    )
    try:
        for conn in opened:
            await conn.set_type_codec(
                "jsonb",
                encoder=lambda v: msgspec.json.encode(v).decode(),
                decoder=msgspec.json.decode,
                schema="pg_catalog",
            )
        yield list(opened)
    finally:
        await asyncio.gather(*(conn.close() for conn in opened))


async def test_concurrent_appends_from_separate_connections_number_events_1_to_n(
    db: asyncpg.Connection, database_url: str
) -> None:
    agent = uuid.uuid4()
    await db.execute(
        "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner)"
        " VALUES ($1, 'w', 'http://127.0.0.1:9/', '1.0', 'alice@example.com')",
        agent,
    )
    row_id = await db.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner)"
        " VALUES ($1, 'task-1', 'working', 'alice@example.com') RETURNING id",
        agent,
    )
    go = asyncio.Event()

    async def write(conn: asyncpg.Connection, n: int) -> int:
        await go.wait()
        return await append_event(conn, row_id, "task_continued", "working", "working", f"w{n}", {})

    async with connections(database_url, WRITERS) as conns:
        writers = [asyncio.create_task(write(conn, n)) for n, conn in enumerate(conns)]
        await asyncio.sleep(0)
        go.set()
        seqs = await asyncio.gather(*writers)

    assert sorted(seqs) == list(range(1, WRITERS + 1))
    stored = await db.fetch("SELECT seq, actor FROM a2a_task_events WHERE task = $1", row_id)
    assert sorted(r["seq"] for r in stored) == list(range(1, WRITERS + 1))
    assert {r["actor"] for r in stored} == {f"w{n}" for n in range(WRITERS)}
    assert await db.fetchval("SELECT last_seq FROM a2a_tasks WHERE id = $1", row_id) == WRITERS
