"""The pool and migrations: the constraints of the schema, and connections held in turn."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import asyncpg
import msgspec
import pytest

from a2a_continue.a2a.protocol import CANONICAL_STATES
from a2a_continue.core import schema
from a2a_continue.core.push import outbox
from a2a_continue.core.schema import migrate_url, migration_files
from a2a_continue.core.tasks.store import append_event, record_outcome
from a2a_continue.runtime.db import HeldConnections, NotDirect, check_direct, create_pool
from tests.support.database import (
    create_database,
    direct_url,
    drop_database,
    hold_claim,
    insert_agent,
    statement_cache,
    with_database,
)
from tests.support.db_faults import faulty_database
from tests.support.waiting import eventually

# The schema must accept exactly the states the product speaks.
STATES = CANONICAL_STATES


@pytest.fixture
async def fresh_url(server_url: str) -> AsyncIterator[str]:
    """An empty database (no migrations) on the test server, dropped afterwards."""
    name = f"a2ac_fresh_{uuid.uuid4().hex[:12]}"
    await create_database(server_url, name)
    try:
        yield with_database(server_url, name)
    finally:
        await drop_database(server_url, name)


def migrate(url: str) -> Awaitable[list[str]]:
    """Apply the pending migrations as the run's gateways do (through its pooler, if any)."""
    return migrate_url(url, statement_cache())


async def recorded(url: str) -> list[str]:
    conn = await asyncpg.connect(direct_url(url))
    try:
        rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
        return [r["version"] for r in rows]
    finally:
        await conn.close()


async def insert_task(
    db: asyncpg.Connection, agent_id: uuid.UUID, task_id: str = "t1", state: str = "working"
) -> uuid.UUID:
    row_id: uuid.UUID = await db.fetchval(
        """INSERT INTO a2a_tasks (agent_id, task_id, state, owner)
           VALUES ($1, $2, $3, 'alice@example.com') RETURNING id""",
        agent_id,
        task_id,
        state,
    )
    return row_id


async def insert_event(db: asyncpg.Connection, task: uuid.UUID, seq: int, **changes: Any) -> None:
    values: dict[str, Any] = {
        "type": "task_created",
        "new_state": "working",
        "actor": "alice@example.com",
        **changes,
    }
    await db.execute(
        """INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor)
           VALUES ($1, $2, $3, $4, $5, $6)""",
        task,
        seq,
        values["type"],
        values.get("previous_state"),
        values["new_state"],
        values["actor"],
    )


# ---- migrations ---------------------------------------------------------------------------


def test_migrations_are_numbered_sql_files() -> None:
    names = [p.name for p in migration_files()]
    assert names, "no migration files found"
    assert names[0] == "0001_init.sql"
    assert names == sorted(names)


async def test_migrate_applies_every_file_once_and_records_it(fresh_url: str) -> None:
    stems = [p.stem for p in migration_files()]
    assert await migrate(fresh_url) == stems
    assert await recorded(fresh_url) == stems


async def test_migrate_twice_is_a_no_op(database_url: str) -> None:
    assert await migrate(database_url) == []
    assert await migrate(database_url) == []
    assert await recorded(database_url) == [p.stem for p in migration_files()]


async def test_concurrent_migrations_apply_each_file_once(fresh_url: str) -> None:
    stems = [p.stem for p in migration_files()]
    first, second = await asyncio.gather(migrate(fresh_url), migrate(fresh_url))
    assert sorted(first + second) == stems
    assert await recorded(fresh_url) == stems


async def migrated_before(conn: asyncpg.Connection, stem: str) -> None:
    """Apply the migrations before ``stem`` as a database of an earlier release has them."""
    await conn.execute("CREATE TABLE schema_migrations (version text PRIMARY KEY,"
                       " applied_at timestamptz NOT NULL DEFAULT now())")  # fmt: skip
    for path in migration_files():
        if path.stem >= stem:
            break
        await conn.execute(path.read_text())
        await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", path.stem)


# ---- constraints --------------------------------------------------------------------------


async def test_the_claims_migration_keeps_the_rows_and_the_live_claims_of_a_running_database(
    fresh_url: str,
) -> None:
    conn = await asyncpg.connect(fresh_url)
    try:
        await migrated_before(conn, "0007")
        task = await insert_task(conn, await insert_agent(conn), state="input-required")
        await insert_event(conn, task, 1, new_state="input-required")
        await conn.execute(
            "UPDATE a2a_tasks SET claim_token = gen_random_uuid(),"
            " claim_expires_at = now() + interval '1 hour'"
        )

        applied = await migrate_url(fresh_url)

        assert applied[0].startswith("0007")
        row = await conn.fetchrow("SELECT state, claim_token FROM a2a_tasks")
        assert (row["state"], row["claim_token"] is not None) == ("input-required", True)
        assert await conn.fetchval("SELECT count(*) FROM a2a_task_events") == 1
    finally:
        await conn.close()


async def test_the_outbox_migration_sends_the_previous_outbox_s_rows_first_under_their_ids(
    fresh_url: str,
) -> None:
    conn = await asyncpg.connect(fresh_url)
    try:
        await migrated_before(conn, "0017")
        agent = await insert_agent(conn)
        task = await conn.fetchval(
            "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, last_seq)"
            " VALUES ($1, 'T1', 'working', 'alice@example.com', 1) RETURNING id",
            agent,
        )
        config = await conn.fetchval(
            "INSERT INTO a2a_push_configs (task, id, url, version)"
            " VALUES ($1, 'c', 'http://127.0.0.1:9/h', '0.3') RETURNING row_id",
            task,
        )
        await conn.execute(  # an event, as the previous release appends one
            "WITH up AS (UPDATE a2a_tasks SET last_seq = last_seq + 1 RETURNING id, last_seq)"
            " INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor)"
            " SELECT id, last_seq, 'task_updated', 'working', 'working', 'alice' FROM up"
        )
        # The previous outbox enqueued that event's delivery as a row.
        (old_id,) = [r["id"] for r in await conn.fetch("SELECT id FROM a2a_push_deliveries")]

        applied = await migrate_url(fresh_url)

        assert applied[0].startswith("0017")
        for name in ("json", "jsonb"):  # as the service's pool reads and writes JSON
            await conn.set_type_codec(name, encoder=lambda v: msgspec.json.encode(v).decode(),
                                      decoder=msgspec.json.decode, schema="pg_catalog")  # fmt: skip
        await append_event(conn, task, "task_updated", "working", "working", "alice", {})
        sent = []
        while taken := await outbox.take(conn, lease := uuid.uuid4(), 30, 10):
            sent += [(r["source"], r["id"]) for r in taken]
            await outbox.delivered(conn, [(r, 200) for r in taken], lease)
        assert sent == [("row", old_id), ("log", outbox.delivery_id(config, 3, 0))]
    finally:
        await conn.close()


async def test_every_canonical_state_is_accepted(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    for state in STATES:
        await insert_task(db, agent, task_id=state, state=state)
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == len(STATES)


@pytest.mark.parametrize("state", ["bogus", "TASK_STATE_COMPLETED", "cancelled", "input_required"])
async def test_a_state_that_is_not_canonical_is_refused_before_it_is_written(
    db: asyncpg.Connection, state: str
) -> None:
    task = await insert_task(db, await insert_agent(db), state="working")
    with pytest.raises(ValueError, match="canonical"):
        await record_outcome(db, task, state=state, event="task_continued", actor="a", data={})
    with pytest.raises(ValueError, match="canonical"):
        await append_event(db, task, "task_updated", "working", state, "a", {})
    row = await db.fetchrow("SELECT state, last_seq FROM a2a_tasks WHERE id = $1", task)
    assert (row["state"], row["last_seq"]) == ("working", 0)
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 0


async def test_an_unknown_event_type_is_refused_before_it_is_written(
    db: asyncpg.Connection,
) -> None:
    task = await insert_task(db, await insert_agent(db), state="working")
    with pytest.raises(ValueError, match="event type"):
        await append_event(db, task, "task_exploded", "working", "working", "a", {})
    with pytest.raises(ValueError, match="event type"):
        await record_outcome(db, task, state="working", event="task_exploded", actor="a", data={})
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 0


@pytest.mark.parametrize(
    "changes",
    [
        {"visibility": "team"},
        {"visibility": "secret"},
        {"protocol_version": "2.0"},
        {"endpoint_url": "ftp://example.com/"},
        {"name": ""},
        {"auth_type": "oauth"},
        {"auth_type": "bearer"},
        {"auth_sealed": b"\x00ciphertext"},
        {"timeout_seconds": 0.0},
    ],
    ids=lambda c: next(iter(c)) + "=" + repr(next(iter(c.values()))),
)
async def test_agent_check_constraints_refuse_bad_rows(
    db: asyncpg.Connection, changes: dict[str, Any]
) -> None:
    with pytest.raises(asyncpg.CheckViolationError):
        await insert_agent(db, **changes)


async def test_team_agent_with_a_team_is_accepted(db: asyncpg.Connection) -> None:
    await insert_agent(db, visibility="team", team_id="red")
    assert await db.fetchval("SELECT count(*) FROM a2a_agents") == 1


async def test_task_id_is_unique_per_agent(db: asyncpg.Connection) -> None:
    agent, other = await insert_agent(db), await insert_agent(db)
    await insert_task(db, agent, "t1")
    await insert_task(db, other, "t1")
    with pytest.raises(asyncpg.UniqueViolationError):
        await insert_task(db, agent, "t1")


async def test_event_seq_is_unique_per_task(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    task, other = await insert_task(db, agent, "t1"), await insert_task(db, agent, "t2")
    await insert_event(db, task, 1)
    await insert_event(db, other, 1)
    with pytest.raises(asyncpg.UniqueViolationError):
        await insert_event(db, task, 1)


async def test_task_needs_an_existing_agent(db: asyncpg.Connection) -> None:
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await insert_task(db, uuid.uuid4())


async def test_deleting_an_agent_cascades_to_tasks_events_and_claims(
    db: asyncpg.Connection,
) -> None:
    agent, kept = await insert_agent(db), await insert_agent(db)
    for owner in (agent, kept):
        task = await insert_task(db, owner)
        await insert_event(db, task, 1)
        await insert_event(db, task, 2, type="task_continued", previous_state="working")
    await hold_claim(db)
    await db.execute("DELETE FROM a2a_agents WHERE id = $1", agent)
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks WHERE agent_id = $1", agent) == 0
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 2
    kept_task = await db.fetchval("SELECT id FROM a2a_tasks")
    assert await db.fetchval("SELECT array_agg(task) FROM a2a_claims") == [kept_task]


async def test_deleting_tasks_deletes_their_events_claims_and_deliveries_only(
    db: asyncpg.Connection,
) -> None:
    agent = await insert_agent(db)
    gone, kept = await insert_task(db, agent, "gone"), await insert_task(db, agent, "kept")
    for task in (gone, kept):
        await insert_event(db, task, 1)
        config = await db.fetchval(
            "INSERT INTO a2a_push_configs (task, id, url, version)"
            " VALUES ($1, 'c', 'http://127.0.0.1:9/h', '0.3') RETURNING row_id",
            task,
        )
        await db.execute(
            "INSERT INTO a2a_push_deliveries (config, task, seq, kind, snapshot)"
            " VALUES ($1, $2, 1, 'task', '{}')",
            config,
            task,
        )
    await hold_claim(db)
    await db.execute("DELETE FROM a2a_tasks WHERE id = $1", gone)
    for table in ("a2a_task_events", "a2a_claims", "a2a_push_deliveries", "a2a_push_configs"):
        tasks = await db.fetchval(f"SELECT array_agg(DISTINCT task) FROM {table}")
        assert tasks == [kept], table


# ---- held connections: more callers than connections all get one; a failed or ended turn
# goes back ----------------------------------------------------------------------------------


async def test_more_callers_than_connections_are_all_served_in_turn(database_url: str) -> None:
    pool = await create_pool(database_url, 2, statement_cache=statement_cache())
    held = HeldConnections(pool, 2)

    async def turn(n: int) -> int:
        conn = await held.acquire()
        try:
            value: int = await conn.fetchval("SELECT $1::int FROM pg_sleep(0.01)", n)
            return value
        finally:
            await held.release(conn, clean=True)

    try:
        assert await asyncio.gather(*(turn(n) for n in range(12))) == list(range(12))
        assert held.out <= 2
        assert pool.get_size() <= 2
    finally:
        await held.close()
        await pool.close()


async def test_a_connection_whose_turn_failed_goes_back_to_the_pool(database_url: str) -> None:
    pool = await create_pool(database_url, 2, statement_cache=statement_cache())
    held = HeldConnections(pool, 2)
    try:
        conn = await held.acquire()
        with pytest.raises(asyncpg.PostgresSyntaxError):
            await conn.execute("SELEC 1")
        await held.release(conn, clean=False)
        assert (held.idle, held.out) == ([], 0)
        conn = await held.acquire()
        await held.release(conn, clean=True)
        assert (held.idle, held.out) == ([conn], 1)
    finally:
        await held.close()
        await pool.close()


async def test_a_waiter_that_gives_up_leaves_the_connection_to_the_next(database_url: str) -> None:
    pool = await create_pool(database_url, 1, statement_cache=statement_cache())
    held = HeldConnections(pool, 1)
    try:
        first = await held.acquire()
        with pytest.raises(TimeoutError):
            await held.acquire(wait_s=0.01)
        await held.release(first, clean=True)
        again = await held.acquire(wait_s=5)
        assert again is first
        await held.release(again, clean=True)
    finally:
        await held.close()
        await pool.close()


async def test_a_waiter_handed_a_connection_that_closed_meanwhile_gets_another(
    database_url: str,
) -> None:
    pool = await create_pool(database_url, 1, statement_cache=statement_cache())
    held = HeldConnections(pool, 1)
    try:
        first = await held.acquire()
        waiting = asyncio.create_task(held.acquire(wait_s=5))
        await eventually(lambda: len(held.waiters) == 1, "the second caller waiting")
        await held.release(first, clean=True)
        first.terminate()  # ended before the waiter it was handed to runs

        again = await waiting

        assert await again.fetchval("SELECT 1") == 1
        await held.release(again, clean=True)
        assert held.out == 1
    finally:
        await held.close()
        await pool.close()


def closed(conn: Any) -> bool:
    """Whether asyncpg has seen the server end ``conn`` (it detaches a lent one)."""
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        return True


async def test_a_connection_the_server_ended_while_lent_goes_back_without_error(
    database_url: str, db: asyncpg.Connection
) -> None:
    # Straight to PostgreSQL: a pooler keeps its client's connection open when the server
    # ends the session behind it (the next statement gets another session).
    pool = await create_pool(direct_url(database_url), 1)
    held = HeldConnections(pool, 1)
    try:
        conn = await held.acquire()
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        await db.fetchval("SELECT pg_terminate_backend($1)", pid)
        await eventually(lambda: closed(conn), "the ended connection seen closed", within_s=10)

        await held.release(conn, clean=True)

        assert (held.idle, held.out) == ([], 0)
        again = await held.acquire(wait_s=5)
        assert await again.fetchval("SELECT 1") == 1
        await held.release(again, clean=True)
    finally:
        await held.close()
        await pool.close()


# ---- through a connection pooler: no named statements, bounds on the client, the check ----


async def test_a_pool_without_a_statement_cache_leaves_no_prepared_statement(
    database_url: str,
) -> None:
    pool = await create_pool(direct_url(database_url), 1, statement_cache=0)
    try:
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT $1::int + 1", 1) == 2
            assert await conn.fetchval("SELECT count(*) FROM pg_prepared_statements") == 0
    finally:
        await pool.close()


async def test_a_statement_past_the_bound_is_cancelled_on_the_server(
    database_url: str, db: asyncpg.Connection
) -> None:
    pool = await create_pool(database_url, 1, timeout_s=0.5, statement_cache=statement_cache())
    try:
        async with pool.acquire() as conn:
            with pytest.raises(TimeoutError):
                await conn.execute("SELECT pg_sleep(60) /* a2ac-bound-test */")
        await eventually(
            lambda: sleeping(db), "no server session still running the statement", within_s=10
        )
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def sleeping(db: asyncpg.Connection) -> bool:
    running = await db.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
        " AND query LIKE '%a2ac-bound-test%' AND pid <> pg_backend_pid()"
    )
    return bool(running == 0)


async def test_a_connection_straight_to_postgresql_passes_the_direct_check(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(direct_url(database_url))
    try:
        await check_direct(conn)
    finally:
        await conn.close()


async def test_a_connection_that_announces_another_backend_is_refused(database_url: str) -> None:
    async with faulty_database(direct_url(database_url)) as pooler:
        pooler.announced_pid = 424242
        conn = await asyncpg.connect(pooler.url)
        try:
            with pytest.raises(NotDirect, match="pooler"):
                await check_direct(conn)
        finally:
            await conn.close()


async def test_migrations_hold_no_lock_once_applied(fresh_url: str) -> None:
    conn = await asyncpg.connect(direct_url(fresh_url))
    try:
        assert await schema.migrate(conn)
        held = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        assert held == 0
    finally:
        await conn.close()
