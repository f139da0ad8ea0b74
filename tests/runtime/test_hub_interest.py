"""Event writes notify only tasks a stream waits on; each process's hub keeps that interest."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from a2a_continue.a2a.answers import STATUS, Update
from a2a_continue.core.tasks.interest import INTEREST_ROWS
from a2a_continue.core.tasks.store import append_event, record_outcome
from a2a_continue.core.tasks.updates import record_update
from a2a_continue.core.tasks.watches import give_up_watch
from a2a_continue.runtime.hub import Hub
from tests.support.database import direct_url, insert_agent, with_application_name
from tests.support.waiting import eventually

APP = "a2ac-interest-test"


async def new_task(db: asyncpg.Connection, task_id: str = "T") -> uuid.UUID:
    agent = await insert_agent(db)
    row_id: uuid.UUID = await db.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner)"
        " VALUES ($1, $2, 'working', 'alice@example.com') RETURNING id",
        agent,
        task_id,
    )
    return row_id


async def interest(db: asyncpg.Connection, row_id: uuid.UUID, expires: str) -> None:
    """A row of interest in the task from some other process, expiring at ``expires`` (SQL)."""
    await db.execute(
        "INSERT INTO a2a_stream_interest (task, process, expires_at)"
        f" VALUES ($1, gen_random_uuid(), {expires})",
        row_id,
    )


async def rows(db: asyncpg.Connection) -> set[tuple[uuid.UUID, uuid.UUID]]:
    """The interest rows: (task, process)."""
    return {(r["task"], r["process"]) for r in await db.fetch("SELECT * FROM a2a_stream_interest")}


async def write_with_every_writer(db: asyncpg.Connection, row_id: uuid.UUID) -> None:
    """One event through each writer of an existing task's events (four notifications)."""
    await append_event(db, row_id, "task_continued", "working", "working", "g", {})
    await record_outcome(db, row_id, state="working", event="task_continued", actor="g", data={})
    update = Update(kind=STATUS, task_id="T", state="input-required")
    await record_update(db, row_id, update, source="poll", actor="g")
    token = uuid.uuid4()
    await db.execute(
        "UPDATE a2a_tasks SET watch_token = $2, watch_expires_at = now() + interval '1 hour'"
        " WHERE id = $1",
        row_id,
        token,
    )
    assert await give_up_watch(db, row_id, token, "g", {})


async def test_an_event_write_notifies_only_a_task_a_stream_waits_on(
    db: asyncpg.Connection, notifications: asyncio.Queue[str]
) -> None:
    watched, unwatched = await new_task(db, "watched"), await new_task(db, "unwatched")
    await interest(db, watched, "now() + interval '1 minute'")
    await write_with_every_writer(db, unwatched)
    await write_with_every_writer(db, watched)
    # Notifications arrive in commit order: any for the unwatched task would come first.
    got = [await asyncio.wait_for(notifications.get(), 5) for _ in range(4)]
    assert got == [str(watched)] * 4
    assert notifications.empty()


async def test_expired_interest_does_not_notify(
    db: asyncpg.Connection, notifications: asyncio.Queue[str]
) -> None:
    expired, live = await new_task(db, "expired"), await new_task(db, "live")
    await interest(db, expired, "now() - interval '1 second'")
    await interest(db, live, "now() + interval '1 minute'")
    await append_event(db, expired, "task_continued", "working", "working", "g", {})
    await append_event(db, live, "task_continued", "working", "working", "g", {})
    assert await asyncio.wait_for(notifications.get(), 5) == str(live)
    assert notifications.empty()


StartHub = Callable[..., Awaitable[Hub]]


@pytest.fixture
async def start_hub(database_url: str) -> AsyncIterator[StartHub]:
    """Start hubs over the test database (tagged so a test can find their backends)."""
    hubs: list[Hub] = []

    async def start(**options: Any) -> Hub:
        hub = Hub(
            rows=INTEREST_ROWS,
            database_url=with_application_name(direct_url(database_url), APP),
            retry_s=0.05,
            **options,
        )
        hubs.append(hub)
        await hub.start()
        await asyncio.wait_for(hub.connected.wait(), 10)
        return hub

    try:
        yield start
    finally:
        for hub in hubs:
            await hub.stop()


async def test_the_hub_keeps_interest_rows_for_its_waiters(
    start_hub: StartHub, db: asyncpg.Connection
) -> None:
    hub = await start_hub()
    first, second = await new_task(db, "first"), await new_task(db, "second")
    with hub.waiter(first):
        await eventually(lambda: has(db, {(first, hub.process)}))
        with hub.waiter(first), hub.waiter(second):
            await eventually(lambda: has(db, {(first, hub.process), (second, hub.process)}))
        await eventually(lambda: has(db, {(first, hub.process)}))
        assert hub.listening
    await eventually(lambda: has(db, set()))
    # The hub drops the rows, then stops listening: wait for the second step too.
    await eventually(lambda: not hub.listening, "the hub stopped listening")


async def has(db: asyncpg.Connection, expected: set[tuple[uuid.UUID, uuid.UUID]]) -> bool:
    return await rows(db) == expected


async def test_each_process_keeps_its_own_interest_in_a_task(
    start_hub: StartHub, db: asyncpg.Connection, notifications: asyncio.Queue[str]
) -> None:
    one, other = await start_hub(), await start_hub()
    task = await new_task(db)
    with one.waiter(task):
        with other.waiter(task):
            await eventually(lambda: has(db, {(task, one.process), (task, other.process)}))
        await eventually(lambda: has(db, {(task, one.process)}))
        await append_event(db, task, "task_continued", "working", "working", "g", {})
        assert await asyncio.wait_for(notifications.get(), 5) == str(task)


@pytest.fixture
async def other_session(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A second connection, to hold locks while the test watches through ``db``."""
    conn = await asyncpg.connect(direct_url(database_url))
    try:
        yield conn
    finally:
        await conn.close()


async def blocked(db: asyncpg.Connection) -> bool:
    """Whether a hub's statement waits for a lock."""
    count = await db.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = $1 AND wait_event_type = 'Lock'",
        APP,
    )
    return bool(count)


async def test_a_task_gaining_interest_wakes_its_waiters_once_listening_and_its_row_committed(
    start_hub: StartHub, db: asyncpg.Connection, other_session: asyncpg.Connection
) -> None:
    hub = await start_hub()
    task = await new_task(db)
    # Hold the task row: the interest row's foreign-key check waits for this transaction.
    held = other_session.transaction()
    await held.start()
    try:
        await other_session.execute("SELECT 1 FROM a2a_tasks WHERE id = $1 FOR UPDATE", task)
        with hub.waiter(task) as waiter:
            await eventually(lambda: blocked(db))
            assert hub.listening
            assert not await waiter.wait(0.2)
            await held.commit()
            # The interest row could commit: only now is the waiter woken.
            assert await waiter.wait(10)
            assert await rows(db) == {(task, hub.process)}
            # And from now on an event write wakes it.
            await append_event(db, task, "task_continued", "working", "working", "g", {})
            assert await waiter.wait(10)
    finally:
        if other_session.is_in_transaction():
            await held.rollback()


async def test_a_deleted_task_does_not_break_the_hub(
    start_hub: StartHub, db: asyncpg.Connection, other_session: asyncpg.Connection
) -> None:
    hub = await start_hub()
    doomed, kept = await new_task(db, "doomed"), await new_task(db, "kept")
    # A task deleted before its interest is written is left out.
    with hub.waiter(uuid.uuid4()) as waiter:
        assert await waiter.wait(10)
    # One deleted while its interest row is being written fails the foreign key: skipped.
    deleting = other_session.transaction()
    await deleting.start()
    try:
        await other_session.execute("DELETE FROM a2a_tasks WHERE id = $1", doomed)
        with hub.waiter(doomed) as waiter:
            await eventually(lambda: blocked(db))
            await deleting.commit()
            assert await waiter.wait(10)
            assert await rows(db) == set()
    finally:
        if other_session.is_in_transaction():
            await deleting.rollback()
    # The hub goes on as before.
    with hub.waiter(kept) as waiter:
        assert await waiter.wait(10)
        assert await rows(db) == {(kept, hub.process)}
        await append_event(db, kept, "task_continued", "working", "working", "g", {})
        assert await waiter.wait(10)
    await eventually(lambda: has(db, set()))


async def test_the_hub_refreshes_its_rows_and_sweeps_long_expired_ones(
    start_hub: StartHub, db: asyncpg.Connection
) -> None:
    hub = await start_hub(refresh_s=0.05)
    task, dead = await new_task(db, "mine"), await new_task(db, "dead")
    await interest(db, dead, "now() - interval '1 hour'")
    with hub.waiter(task):
        await eventually(lambda: has(db, {(task, hub.process)}))
        # Rows that ran out (or were swept while this process stalled) come back.
        await db.execute("DELETE FROM a2a_stream_interest")
        await eventually(lambda: has(db, {(task, hub.process)}))
        await db.execute("UPDATE a2a_stream_interest SET expires_at = now()")
        await eventually(lambda: extended(db))
    await eventually(lambda: has(db, set()))


async def extended(db: asyncpg.Connection) -> bool:
    """Whether the interest rows expire more than half a TTL (60 s) from now."""
    value = await db.fetchval(
        "SELECT bool_and(expires_at > now() + interval '30 seconds') FROM a2a_stream_interest"
    )
    return bool(value)


async def test_the_hub_deletes_its_rows_when_it_stops(
    start_hub: StartHub, db: asyncpg.Connection
) -> None:
    hub, other = await start_hub(), await start_hub()
    task = await new_task(db)
    with hub.waiter(task), other.waiter(task):
        await eventually(lambda: has(db, {(task, hub.process), (task, other.process)}))
        await hub.stop()
        assert await rows(db) == {(task, other.process)}


async def test_the_hub_recreates_its_rows_after_a_reconnect(
    start_hub: StartHub, db: asyncpg.Connection
) -> None:
    hub = await start_hub()
    task, left = await new_task(db, "waited"), await new_task(db, "left")
    with hub.waiter(task) as waiter:
        with hub.waiter(left):
            await eventually(lambda: has(db, {(task, hub.process), (left, hub.process)}))
            assert await waiter.wait(10)
            # The rows ran out while the connection was down (and a stream left meanwhile).
            await db.execute("UPDATE a2a_stream_interest SET expires_at = now() - interval '1 s'")
            await db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = $1 AND datname = current_database()",
                APP,
            )
        # Interest written anew on the new connection wakes the waiter to re-read.
        assert await waiter.wait(10)
        await eventually(lambda: has(db, {(task, hub.process)}))
        assert await db.fetchval("SELECT expires_at > now() FROM a2a_stream_interest")
