"""The push outbox is the event log: what an event makes due, and how dispatchers take and
settle deliveries (SPEC §12, §22)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg

from a2a_continue.core.push import outbox, takes
from a2a_continue.core.tasks.store import append_event
from tests.support.database import direct_url
from tests.support.plans import rows_read
from tests.support.push import owed

TASK_ROW = uuid.UUID(int=2)
UPDATED = ("task_updated", "working", "working", "alice", {})


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


async def task_with_configs_of(db: asyncpg.Connection, task: uuid.UUID, *versions: str) -> None:
    for i, version in enumerate(versions):
        await db.execute(
            "INSERT INTO a2a_push_configs (task, id, url, version)"
            " VALUES ($1, $2, 'http://127.0.0.1:9/h', $3)",
            task,
            f"more{i}",
            version,
        )


async def append(db: asyncpg.Connection, times: int = 1) -> None:
    for _ in range(times):
        await append_event(db, TASK_ROW, *UPDATED)


async def take(db: asyncpg.Connection, lease: uuid.UUID | None = None) -> list[asyncpg.Record]:
    return await outbox.take(db, lease or uuid.uuid4(), 30, 10)


async def test_an_event_of_a_task_without_configs_owes_nothing(db: asyncpg.Connection) -> None:
    await task_with_configs(db)
    await append_event(db, TASK_ROW, "task_canceled", "working", "canceled", "alice", {})
    assert await owed(db) == []
    assert await db.fetchval("SELECT pushed FROM a2a_task_events") is None


async def test_the_append_that_records_an_event_makes_its_deliveries_due(
    db: asyncpg.Connection,
) -> None:
    await task_with_configs(db, "1.0")
    await append_event(db, TASK_ROW, "task_canceled", "working", "canceled", "alice", {})
    await append(db)
    assert await owed(db) == [(2, 0, "task"), (3, 0, "status")]
    assert await db.fetchval("SELECT count(*) FROM a2a_push_deliveries") == 0  # no row written


async def test_the_event_carries_the_task_as_its_statement_left_it(
    db: asyncpg.Connection,
) -> None:
    await task_with_configs(db, "0.3")
    await append_event(db, TASK_ROW, "task_canceled", "working", "canceled", "alice", {})
    pushed = await db.fetchval("SELECT pushed FROM a2a_task_events WHERE seq = 2")
    assert pushed == {"state": "working", "statusMessage": None, "artifacts": []}


async def test_events_that_change_nothing_owe_nothing(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "1.0", "0.3")
    await append_event(db, TASK_ROW, "task_continue_failed", None, None, "alice", {})
    await append_event(db, TASK_ROW, "task_redirected", None, None, "alice", {})
    error = {"messageId": "m", "error": {"code": -32001}}
    await append_event(db, TASK_ROW, "task_continued", "working", "working", "alice", error)
    assert await owed(db) == []
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events WHERE pushed IS NOT NULL") == 0


async def test_a_task_is_pushed_while_it_has_an_enabled_config(db: asyncpg.Connection) -> None:
    (config,) = await task_with_configs(db, "0.3")

    async def pushed() -> list[int]:
        await append(db)
        return [seq for seq, _, _ in await owed(db)]

    assert await pushed() == [2]
    await db.execute("UPDATE a2a_push_configs SET enabled = false WHERE row_id = $1", config)
    assert await pushed() == []
    await db.execute(  # re-enabled (as creating it again does): from the next event on
        "UPDATE a2a_push_configs c SET enabled = true, pos_seq = t.last_seq + 1"
        " FROM a2a_tasks t WHERE c.row_id = $1 AND t.id = c.task",
        config,
    )
    assert await pushed() == [4]
    await db.execute("DELETE FROM a2a_push_configs WHERE row_id = $1", config)
    assert await pushed() == []
    assert await db.fetchval("SELECT push_enabled FROM a2a_tasks WHERE id = $1", TASK_ROW) is False


async def test_a_rolled_back_event_leaves_no_delivery(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "0.3")
    tx = db.transaction()
    await tx.start()
    await append_event(db, TASK_ROW, "task_canceled", "working", "canceled", "alice", {})
    await tx.rollback()
    assert await owed(db) == []


async def test_only_the_next_delivery_of_a_config_is_due(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "0.3")
    await append(db, 3)
    taken = await take(db)
    assert [r["seq"] for r in taken] == [2]
    assert await take(db) == []  # leased: not again


async def test_a_delivery_id_is_derived_from_config_seq_and_part(db: asyncpg.Connection) -> None:
    (config,) = await task_with_configs(db, "0.3")
    await append(db)
    (row,) = await take(db)
    assert row["id"] == outbox.delivery_id(config, 2, 0)


async def test_a_settled_delivery_moves_its_config_on_and_leaves_its_history(
    db: asyncpg.Connection,
) -> None:
    (config,) = await task_with_configs(db, "0.3")
    await append(db, 2)
    lease = uuid.uuid4()
    (first,) = await take(db, lease)
    await outbox.delivered(db, [(first, 204)], lease)
    history = await db.fetchrow("SELECT * FROM a2a_push_deliveries")
    event_at = await db.fetchval("SELECT created_at FROM a2a_task_events WHERE seq = 2")
    assert (history["id"], history["state"], history["attempts"]) == (first["id"], "delivered", 1)
    assert (history["last_status"], history["created_at"]) == (204, event_at)
    (second,) = await take(db)
    assert second["seq"] == 3 and second["id"] == outbox.delivery_id(config, 3, 0)


async def test_a_1_0_config_is_sent_the_task_then_a_status_and_each_changed_artifact(
    db: asyncpg.Connection,
) -> None:
    await task_with_configs(db, "1.0")
    await append(db)
    artifacts = [{"artifactId": "a1", "parts": []}, {"artifactId": "a2", "parts": []}]
    await db.execute("UPDATE a2a_tasks SET artifacts = $1::jsonb", artifacts)
    data = {"artifactIds": ["a2"], "source": "poll"}
    await append_event(db, TASK_ROW, "task_updated", "working", "input-required", "alice", data)
    sent = []
    while taken := await take(db, lease := uuid.uuid4()):
        (row,) = taken
        sent.append((row["seq"], row["part"], row["kind"]))
        await outbox.delivered(db, [(row, 200)], lease)
    assert sent == [(2, 0, "task"), (3, 0, "status"), (3, 2, "artifact")]
    assert await owed(db) == []


async def test_a_take_reads_the_head_of_each_queue_not_the_rows_behind_it(
    db: asyncpg.Connection,
) -> None:
    configs = await task_with_configs(db, "0.3", "0.3", "0.3")
    # 3,000 pending rows per config, all due: only the first of each may be sent.
    await db.execute(
        "INSERT INTO a2a_push_deliveries (config, task, seq, part, kind, snapshot)"
        " SELECT c, $2, s, 0, 'task', '{}' FROM unnest($1::uuid[]) c, generate_series(2, 3001) s",
        configs,
        TASK_ROW,
    )
    await db.execute("ANALYZE a2a_push_deliveries")  # as autovacuum would, after such a load
    plan = await _explained(db, takes.TAKE_ROWS)
    taken = await take(db)
    assert sorted(r["seq"] for r in taken) == [2, 2, 2]
    read = round(rows_read(plan, {"a2a_push_deliveries"}))
    assert read <= 10 * len(configs), f"a take read {read} delivery rows to find 3 queue heads"


async def test_a_take_reads_a_config_s_next_events_not_its_whole_backlog(
    db: asyncpg.Connection,
) -> None:
    configs = await task_with_configs(db, "0.3", "1.0", "1.0")
    await append(db)  # the 1.0 configs' first delivery (the task) is sent: then updates
    for row in await take(db, lease := uuid.uuid4()):
        await outbox.delivered(db, [(row, 200)], lease)
    await db.execute(
        "INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor, pushed)"
        " SELECT $1, s, 'task_updated', 'working', 'working', 'alice', '{\"state\": \"working\"}'"
        " FROM generate_series(3, 3002) s",
        TASK_ROW,
    )
    await db.execute("UPDATE a2a_tasks SET last_seq = 3002")
    await db.execute("ANALYZE a2a_task_events")
    plan = await _explained(db, takes.TAKE_LOG)
    taken = await take(db)
    assert sorted(r["seq"] for r in taken) == [3, 3, 3] and len(configs) == 3
    read = round(rows_read(plan, {"a2a_task_events"}))
    assert read <= 10 * len(configs), f"a take read {read} events to find 3 next deliveries"


@contextlib.asynccontextmanager
async def push_notifications(
    db: asyncpg.Connection, database_url: str
) -> AsyncIterator[Callable[[], Awaitable[int]]]:
    """Listen on the dispatchers' channel; yield how many notifications were heard so far."""
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
        yield heard_so_far
    finally:
        await listener.close()


async def test_a_pushed_event_notifies_only_while_a_dispatcher_says_it_waits(
    db: asyncpg.Connection, database_url: str
) -> None:
    await task_with_configs(db, "0.3")
    async with push_notifications(db, database_url) as heard_so_far:
        await db.execute("UPDATE a2a_push_wake SET sleeping = false")
        await append(db)
        assert await heard_so_far() == 0  # nobody waits
        await outbox.sleeping(db, 30)
        await append(db, 2)
        assert await heard_so_far() == 2
        await outbox.awake(db)  # the woken dispatcher says so: the events stop notifying
        await append(db)
        assert await heard_so_far() == 2
        await outbox.sleeping(db, 30)
        await db.execute("UPDATE a2a_push_wake SET until = now() - interval '1 s'")
        await append(db)  # a dispatcher that said it waits and never looked again
        assert await heard_so_far() == 2
    assert len(await owed(db)) == 5


async def test_an_event_of_a_task_without_configs_never_notifies(
    db: asyncpg.Connection, database_url: str
) -> None:
    await task_with_configs(db)
    async with push_notifications(db, database_url) as heard_so_far:
        await outbox.sleeping(db, 30)
        await append(db)
        assert await heard_so_far() == 0
        await task_with_configs_of(db, TASK_ROW, "0.3")
        await append(db)
        assert await heard_so_far() == 1


async def test_a_lease_that_ran_out_is_taken_again(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "0.3")
    await append(db)
    (first,) = await take(db)
    await db.execute("UPDATE a2a_push_configs SET lease_expires_at = now() - interval '1 s'")
    (again,) = await take(db)
    assert again["id"] == first["id"] and again["attempts"] == 2


async def test_two_dispatchers_never_take_the_same_config(
    db: asyncpg.Connection, database_url: str
) -> None:
    await task_with_configs(db, *["0.3"] * 6)
    await append(db)
    other = await asyncpg.connect(database_url)
    try:
        async with db.transaction():
            mine = await outbox.take(db, uuid.uuid4(), 30, 3)
            # The other dispatcher skips the configs this open transaction holds.
            theirs = await outbox.take(other, uuid.uuid4(), 30, 10)
    finally:
        await other.close()
    assert len(mine) == 3 and len(theirs) == 3
    assert {r["id"] for r in mine}.isdisjoint({r["id"] for r in theirs})


async def test_a_failed_attempt_is_retried_from_its_row_and_the_last_makes_it_dead(
    db: asyncpg.Connection,
) -> None:
    await task_with_configs(db, "0.3")
    await append(db, 2)
    states, ids = [], []
    for _ in range(2):
        lease = uuid.uuid4()
        (row,) = await take(db, lease)
        ids.append(row["id"])
        state = await outbox.failed(
            db, row, lease, status=500, error="500", retry_s=0.0, max_attempts=2
        )
        states.append(state)
    assert states == ["pending", "dead"] and ids[0] == ids[1]
    row = await db.fetchrow("SELECT state, attempts, snapshot FROM a2a_push_deliveries")
    assert (row["state"], row["attempts"]) == ("dead", 2) and row["snapshot"] is not None
    (after,) = await take(db)  # the config's later deliveries go on
    assert after["seq"] == 3


async def test_a_pending_row_holds_its_config_s_later_events_back(db: asyncpg.Connection) -> None:
    await task_with_configs(db, "0.3")
    await append(db, 2)
    lease = uuid.uuid4()
    (row,) = await take(db, lease)
    await outbox.failed(db, row, lease, status=503, error="503", retry_s=3600, max_attempts=5)
    assert await take(db) == []  # seq 3 waits for seq 2's retry


async def test_a_settle_by_a_lease_that_lost_the_config_changes_nothing(
    db: asyncpg.Connection,
) -> None:
    await task_with_configs(db, "0.3")
    await append(db)
    (row,) = await take(db)
    await outbox.delivered(db, [(row, 200)], uuid.uuid4())
    assert await db.fetchval("SELECT count(*) FROM a2a_push_deliveries") == 0
    assert await owed(db) == [(2, 0, "task")]


async def test_a_config_of_a_task_that_ended_long_ago_and_was_sent_everything_parks(
    db: asyncpg.Connection,
) -> None:
    await task_with_configs(db, "0.3")
    await append_event(db, TASK_ROW, "task_canceled", "working", "canceled", "alice", {})
    await db.execute("UPDATE a2a_tasks SET state = 'canceled', completed_at = now()")
    await outbox.park(db)
    assert await db.fetchval("SELECT parked FROM a2a_push_configs") is False  # still owed
    (row,) = await take(db, lease := uuid.uuid4())
    await outbox.delivered(db, [(row, 200)], lease)
    await outbox.park(db)
    assert await db.fetchval("SELECT parked FROM a2a_push_configs") is False  # ended just now
    await db.execute("UPDATE a2a_tasks SET completed_at = now() - interval '3 hours'")
    await outbox.park(db)
    assert await db.fetchval("SELECT parked FROM a2a_push_configs") is True


async def test_an_event_the_previous_release_wrote_is_sent_with_the_task_as_it_stands(
    db: asyncpg.Connection,
) -> None:
    await task_with_configs(db, "0.3")
    # How the previous release's writers append: no `pushed` column.
    await db.execute(
        "WITH up AS (UPDATE a2a_tasks SET last_seq = last_seq + 1 RETURNING id, last_seq)"
        " INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor)"
        " SELECT id, last_seq, 'task_updated', 'working', 'working', 'alice' FROM up"
    )
    await db.execute("UPDATE a2a_tasks SET state = 'input-required'")
    (row,) = await take(db)
    assert (row["seq"], row["kind"]) == (2, "task")
    assert row["snapshot"]["state"] == "input-required"


async def test_a_row_of_the_previous_outbox_is_sent_before_the_log(db: asyncpg.Connection) -> None:
    (config,) = await task_with_configs(db, "0.3")
    legacy = await db.fetchval(
        "INSERT INTO a2a_push_deliveries (config, task, seq, part, kind, snapshot)"
        " VALUES ($1, $2, 1, 0, 'task', '{\"state\": \"working\"}') RETURNING id",
        config,
        TASK_ROW,
    )
    await append(db)
    lease = uuid.uuid4()
    (first,) = await take(db, lease)
    assert (first["id"], first["source"]) == (legacy, "row")
    await outbox.delivered(db, [(first, 200)], lease)
    (second,) = await take(db)
    assert (second["seq"], second["source"]) == (2, "log")


async def _explained(db: asyncpg.Connection, statement: str) -> object:
    explain = db.transaction()
    await explain.start()
    try:  # EXPLAIN ANALYZE runs the statement: its leases are rolled back
        return await db.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", uuid.uuid4(), 30, 10
        )
    finally:
        await explain.rollback()


async def test_a_round_settles_and_leases_the_next_delivery_of_the_same_config(
    db: asyncpg.Connection,
) -> None:
    (config,) = await task_with_configs(db, "0.3")
    await append(db, 3)
    lease = uuid.uuid4()
    (first,) = await take(db, lease)
    (second,) = await outbox.round_of(db, [(first, 200)], lease, 30, 10)
    assert (second["seq"], second["id"], second["attempts"]) == (
        3,
        outbox.delivery_id(config, 3, 0),
        1,
    )
    assert await take(db) == []  # still this dispatcher's
    (third,) = await outbox.round_of(db, [(second, 200)], lease, 30, 10)
    assert await outbox.round_of(db, [(third, 200)], lease, 30, 10) == []
    rows = await db.fetch("SELECT seq, state FROM a2a_push_deliveries ORDER BY seq")
    assert [(r["seq"], r["state"]) for r in rows] == [
        (2, "delivered"),
        (3, "delivered"),
        (4, "delivered"),
    ]
    assert await owed(db) == []
