"""The push outbox's statements: what an event enqueues, and how dispatchers take rows."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from a2a_continue.core.push import deliveries as outbox
from a2a_continue.core.tasks.store import append_event
from tests.support.database import direct_url
from tests.support.plans import rows_read

TASK_ROW = uuid.UUID(int=2)


async def task_with_configs(db: asyncpg.Connection, *versions: str) -> list[uuid.UUID]:
    """A task in `working` (seq 1) with one config per version; the configs' row ids."""
    agent = uuid.uuid4()
    await db.execute(
        "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner)"
        " VALUES ($1, 'a', 'http://127.0.0.1:9/', '1.0', 'alice')",
        agent,
    )
    await db.execute(
        "INSERT INTO a2a_tasks (id, agent_id, task_id, state, owner, last_seq)"
        " VALUES ($1, $2, 'T1', 'working', 'alice', 1)",
        TASK_ROW,
        agent,
    )
    return [
        await db.fetchval(
            "INSERT INTO a2a_push_configs (task, id, url, version)"
            " VALUES ($1, $2, 'http://127.0.0.1:9/h', $3) RETURNING row_id",
            TASK_ROW,
            f"c{i}",
            version,
        )
        for i, version in enumerate(versions)
    ]


async def queued(db: asyncpg.Connection) -> list[tuple[int, int, str]]:
    rows = await db.fetch("SELECT seq, part, kind FROM a2a_push_deliveries ORDER BY seq, part")
    return [(r["seq"], r["part"], r["kind"]) for r in rows]


async def test_an_event_of_a_task_without_configs_enqueues_nothing(db: asyncpg.Connection) -> None:
    await task_with_configs(db)
    await append_event(db, TASK_ROW, "task_canceled", "working", "canceled", "alice", {})
    assert await queued(db) == []


async def test_the_append_that_records_an_event_enqueues_its_deliveries(
    db: asyncpg.Connection,
) -> None:
    await task_with_configs(db, "1.0")
    await append_event(db, TASK_ROW, "task_canceled", "working", "canceled", "alice", {})
    await append_event(db, TASK_ROW, "task_updated", "working", "working", "alice", {})
    assert await queued(db) == [(2, 0, "task"), (3, 0, "status")]


async def test_events_that_change_nothing_enqueue_nothing(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "1.0", "0.3")
    await append_event(db, TASK_ROW, "task_continue_failed", None, None, "alice", {})
    await append_event(db, TASK_ROW, "task_redirected", None, None, "alice", {})
    error = {"messageId": "m", "error": {"code": -32001}}
    await append_event(db, TASK_ROW, "task_continued", "working", "working", "alice", error)
    assert await queued(db) == []


async def test_a_task_is_pushed_while_it_has_an_enabled_config(db: asyncpg.Connection) -> None:
    (config,) = await task_with_configs(db, "0.3")

    async def pushed() -> list[int]:
        await append_event(db, TASK_ROW, "task_updated", "working", "working", "alice", {})
        rows = await db.fetch("SELECT seq FROM a2a_push_deliveries ORDER BY seq")
        return [r["seq"] for r in rows]

    assert await pushed() == [2]
    await db.execute("UPDATE a2a_push_configs SET enabled = false WHERE row_id = $1", config)
    assert await pushed() == [2]
    await db.execute("UPDATE a2a_push_configs SET enabled = true WHERE row_id = $1", config)
    assert await pushed() == [2, 4]
    await db.execute("DELETE FROM a2a_push_deliveries")
    await db.execute("DELETE FROM a2a_push_configs WHERE row_id = $1", config)
    assert await pushed() == []
    assert await db.fetchval("SELECT push_enabled FROM a2a_tasks WHERE id = $1", TASK_ROW) is False


async def test_a_rolled_back_event_leaves_no_delivery(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "0.3")
    tx = db.transaction()
    await tx.start()
    await append_event(db, TASK_ROW, "task_canceled", "working", "canceled", "alice", {})
    await tx.rollback()
    assert await queued(db) == []


async def test_only_the_first_pending_delivery_of_a_config_is_due(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "0.3")
    for _ in range(3):
        await append_event(db, TASK_ROW, "task_updated", "working", "working", "alice", {})
    taken = await outbox.take_due(db, uuid.uuid4(), 30, 10)
    assert [r["seq"] for r in taken] == [2]
    assert await outbox.take_due(db, uuid.uuid4(), 30, 10) == []  # leased: not again


async def test_a_take_reads_the_head_of_each_queue_not_the_rows_behind_it(
    db: asyncpg.Connection,
) -> None:
    configs = await task_with_configs(db, "0.3", "0.3", "0.3")
    # 3,000 pending deliveries per config, all due: only the first of each may be sent.
    await db.execute(
        "INSERT INTO a2a_push_deliveries (config, task, seq, part, kind, snapshot)"
        " SELECT c, $2, s, 0, 'task', '{}' FROM unnest($1::uuid[]) c, generate_series(2, 3001) s",
        configs,
        TASK_ROW,
    )
    await db.execute("ANALYZE a2a_push_deliveries")  # as autovacuum would, after such a load
    explain = db.transaction()
    await explain.start()
    try:  # EXPLAIN ANALYZE runs the statement: its leases are rolled back
        plan = await db.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {outbox.TAKE_DUE}", uuid.uuid4(), 30, 10
        )
    finally:
        await explain.rollback()
    taken = await outbox.take_due(db, uuid.uuid4(), 30, 10)
    assert sorted(r["seq"] for r in taken) == [2, 2, 2]
    read = round(rows_read(plan, {"a2a_push_deliveries"}))
    assert read <= 10 * len(configs), f"a take read {read} delivery rows to find 3 queue heads"


async def test_an_enqueue_notifies_only_once_a_dispatcher_said_it_waits(
    db: asyncpg.Connection, database_url: str
) -> None:
    await task_with_configs(db, "0.3")
    listener = await asyncpg.connect(direct_url(database_url))  # LISTEN needs a session
    heard: list[str] = []
    marks: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(outbox.PUSH_CHANNEL, lambda *a: heard.append(a[2]))
    await listener.add_listener("test_marker", lambda *a: marks.put_nowait(a[3]))

    async def heard_so_far() -> int:
        # Notifications arrive in commit order: once the marker is heard, every
        # notification committed before it has been.
        await db.execute("SELECT pg_notify('test_marker', 'm')")
        async with asyncio.timeout(10):
            await marks.get()
        return len(heard)

    try:
        await db.execute("UPDATE a2a_push_wake SET sleeping = false")
        await append_event(db, TASK_ROW, "task_updated", "working", "working", "alice", {})
        assert await heard_so_far() == 0  # nobody waits: the queue is not even read
        assert await outbox.sleeping(db) is True  # this dispatcher set the flag
        assert await outbox.sleeping(db) is False  # already set
        for _ in range(3):
            await append_event(db, TASK_ROW, "task_updated", "working", "working", "alice", {})
        assert await heard_so_far() == 1  # the first enqueue after it, not the ones behind
    finally:
        await listener.close()
    assert await db.fetchval("SELECT sleeping FROM a2a_push_wake") is False
    assert len(await queued(db)) == 4


async def test_an_event_that_enqueues_nothing_leaves_the_flag(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "1.0")
    await db.execute("UPDATE a2a_push_wake SET sleeping = true")
    await append_event(db, TASK_ROW, "task_redirected", None, None, "alice", {})
    assert await db.fetchval("SELECT sleeping FROM a2a_push_wake") is True


async def test_a_lease_that_ran_out_is_taken_again(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "0.3")
    await append_event(db, TASK_ROW, "task_updated", "working", "working", "alice", {})
    (first,) = await outbox.take_due(db, uuid.uuid4(), 30, 10)
    await db.execute("UPDATE a2a_push_deliveries SET lease_expires_at = now() - interval '1 s'")
    (again,) = await outbox.take_due(db, uuid.uuid4(), 30, 10)
    assert again["id"] == first["id"] and again["attempts"] == 2


async def test_two_dispatchers_never_take_the_same_row(
    db: asyncpg.Connection, database_url: str
) -> None:
    await task_with_configs(db, *["0.3"] * 6)
    await append_event(db, TASK_ROW, "task_updated", "working", "working", "alice", {})
    other = await asyncpg.connect(database_url)
    try:
        async with db.transaction():
            mine = await outbox.take_due(db, uuid.uuid4(), 30, 3)
            # The other dispatcher skips the rows this open transaction holds.
            theirs = await outbox.take_due(other, uuid.uuid4(), 30, 10)
    finally:
        await other.close()
    assert len(mine) == 3 and len(theirs) == 3
    assert {r["id"] for r in mine}.isdisjoint({r["id"] for r in theirs})


async def test_the_last_failed_attempt_makes_the_delivery_dead(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "0.3")
    await append_event(db, TASK_ROW, "task_updated", "working", "working", "alice", {})
    states = []
    for _ in range(2):
        lease = uuid.uuid4()
        (row,) = await outbox.take_due(db, lease, 30, 10)
        state = await outbox.failed(
            db, row["id"], lease, status=500, error="500", retry_s=0.0, max_attempts=2
        )
        states.append(state)
    assert states == ["pending", "dead"]
    assert await outbox.take_due(db, uuid.uuid4(), 30, 10) == []


async def test_a_settle_by_a_lease_that_lost_the_row_changes_nothing(
    db: asyncpg.Connection,
) -> None:
    await task_with_configs(db, "0.3")
    await append_event(db, TASK_ROW, "task_updated", "working", "working", "alice", {})
    (row,) = await outbox.take_due(db, uuid.uuid4(), 30, 10)
    await outbox.delivered(db, [(row["id"], 200)], uuid.uuid4())
    assert await db.fetchval("SELECT state FROM a2a_push_deliveries") == "pending"
