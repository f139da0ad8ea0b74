"""The hub's one poll per process wakes the streams with news; woken streams share a read."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from a2a_continue.core.tasks.interest import INTEREST_ROWS, SCOPE_SQL
from a2a_continue.runtime.hub import Hub
from tests.support.database import direct_url, insert_agent, with_application_name


async def new_task(db: asyncpg.Connection, task_id: str) -> tuple[uuid.UUID, str]:
    """A task with 3 events' worth of last_seq; (row id, its scope as a stream saw it)."""
    agent = await insert_agent(db)
    row = await db.fetchrow(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, last_seq)"
        " VALUES ($1, $2, 'working', 'alice@example.com', 3) RETURNING id",
        agent,
        task_id,
    )
    scope = await db.fetchval(
        f"SELECT {SCOPE_SQL} FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id"
        " WHERE t.id = $1",
        row["id"],
    )
    return row["id"], scope


@pytest.fixture
async def hub(database_url: str) -> AsyncIterator[Hub]:
    hub = Hub(
        rows=INTEREST_ROWS,
        database_url=with_application_name(direct_url(database_url), "a2ac-poll-test"),
        poll_s=0.05,
        listen=False,
    )
    await hub.start()
    try:
        await asyncio.wait_for(hub.connected.wait(), 10)
        yield hub
    finally:
        await hub.stop()


async def test_the_process_poll_wakes_only_streams_whose_task_has_news(
    hub: Hub, db: asyncpg.Connection
) -> None:
    (quiet, quiet_scope), (grown, grown_scope) = await new_task(db, "Q"), await new_task(db, "G")
    (hidden, hidden_scope), (gone, gone_scope) = await new_task(db, "H"), await new_task(db, "D")
    with (
        hub.waiter(quiet) as q,
        hub.waiter(grown) as g,
        hub.waiter(hidden) as h,
        hub.waiter(gone) as d,
    ):
        for waiter, scope in ((q, quiet_scope), (g, grown_scope), (h, hidden_scope)):
            waiter.seen, waiter.scope = 3, scope
        d.seen, d.scope = 3, gone_scope
        await db.execute("UPDATE a2a_tasks SET last_seq = 4 WHERE id = $1", grown)
        await db.execute("UPDATE a2a_tasks SET owner = 'carol@example.com' WHERE id = $1", hidden)
        await db.execute("DELETE FROM a2a_tasks WHERE id = $1", gone)
        assert await g.wait(10) and await h.wait(10) and await d.wait(10)
        # Every poll that woke the others saw the quiet task unchanged.
        assert not await q.wait(0)
        assert not g.recheck and h.recheck and d.recheck


async def test_streams_woken_together_share_one_read_until_the_next_wake(hub: Hub) -> None:
    task = uuid.uuid4()
    started: list[int] = []
    release = asyncio.Event()

    async def read() -> int:
        started.append(1)
        await release.wait()
        return len(started)

    with hub.waiter(task):
        first = [hub.shared(task, 7, read) for _ in range(3)]
        await asyncio.sleep(0)
        hub.wake({task})  # news: a later reader must not join the read already in flight
        later = hub.shared(task, 7, read)
        release.set()
        results = await asyncio.gather(*first, later)
        # Three streams, one read; the one that came after the wake read again.
        assert len(started) == 2
        assert len(set(results[:3])) == 1
