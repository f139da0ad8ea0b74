"""Follow-up claims in their own table: one holder per task, the outcome's row update kept
in place, and claims of the previous release (on the task row) honoured while both run."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from a2a_continue.core.tasks.claims import SWEEP_EXPIRED_CLAIMS
from a2a_continue.core.tasks.store import SYSTEM_ACTOR, outcome_statement, record_claimed_outcome
from tests.support.agents import events, register_fake, start
from tests.support.client import Client
from tests.support.database import TASKS_WITH_CLAIMS, direct_url, hold_claim, insert_agent
from tests.support.fakes import StartFake, WeatherFake
from tests.support.waiting import eventually

# How a process of the previous release claims a task and leases a watch (on the task row).
ROW_CLAIM = """UPDATE a2a_tasks SET claim_token = gen_random_uuid(),
    claim_expires_at = now() + interval '1 hour'
WHERE task_id = $1 AND (claim_expires_at IS NULL OR claim_expires_at < now())"""
ROW_LEASE = """UPDATE a2a_tasks SET watch_token = gen_random_uuid(),
    watch_expires_at = now() + interval '1 hour' WHERE task_id = $1"""


async def claimed_task(db: asyncpg.Connection, task_id: str = "t1") -> uuid.UUID:
    agent = await insert_agent(db)
    row_id: uuid.UUID = await db.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner)"
        " VALUES ($1, $2, 'input-required', 'alice@example.com') RETURNING id",
        agent,
        task_id,
    )
    return row_id


async def test_a_follow_up_leaves_no_claim_behind_and_writes_none_on_the_task_row(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)

    r = await client.call("POST", agent.messages(task["id"]), {"text": "Rome"})

    assert r.status == 200, r.raw
    assert await db.fetchval("SELECT count(*) FROM a2a_claims") == 0
    row = await db.fetchrow("SELECT claim_token, claim_expires_at FROM a2a_tasks")
    assert tuple(row) == (None, None)


async def test_an_outcome_that_keeps_the_state_updates_the_task_row_in_place(
    db: asyncpg.Connection,
) -> None:
    row_id = await claimed_task(db)
    claim = await hold_claim(db)
    statement = outcome_statement(db, whole_row=False)
    async with db.transaction():
        await db.execute(
            statement, row_id, "input-required", None, None, claim, 1,
            "task_continued", "alice@example.com", {"messageId": "m"},
        )  # fmt: skip
        counts = await db.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
            " WHERE relname = 'a2a_tasks'"
        )
    assert tuple(counts) == (1, 1)
    assert await db.fetchval("SELECT count(*) FROM a2a_claims") == 0


async def test_deleting_a_task_deletes_its_claim(db: asyncpg.Connection) -> None:
    row_id = await claimed_task(db)
    await hold_claim(db)

    await db.execute("DELETE FROM a2a_tasks WHERE id = $1", row_id)

    assert await db.fetchval("SELECT count(*) FROM a2a_claims") == 0


async def test_a_live_claim_of_the_previous_release_keeps_the_task_busy(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    await db.execute(ROW_CLAIM, task["id"])

    r = await client.call("POST", agent.messages(task["id"]), {"text": "Rome"})

    assert r.status == 409, r.raw
    assert await db.fetchval("SELECT count(*) FROM a2a_claims") == 0


async def test_an_expired_claim_of_the_previous_release_is_logged_and_cleared_when_taken_over(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    await db.execute(
        "UPDATE a2a_tasks SET claim_token = gen_random_uuid(),"
        " claim_expires_at = now() - interval '1 second'"
    )

    r = await client.call("POST", agent.messages(task["id"]), {"text": "Rome"})

    assert r.status == 200, r.raw
    logged = await events(client, agent, task["id"])
    assert [e["type"] for e in logged] == ["task_created", "task_continue_failed", "task_continued"]
    assert logged[1]["data"]["reason"] == "claim-expired"
    assert await db.fetchval("SELECT claim_token FROM a2a_tasks") is None


async def test_the_previous_release_cannot_claim_a_task_that_a_claim_holds(
    db: asyncpg.Connection,
) -> None:
    await claimed_task(db)
    await hold_claim(db)

    assert await db.execute(ROW_CLAIM, "t1") == "UPDATE 0"
    await db.execute("DELETE FROM a2a_claims")
    assert await db.execute(ROW_CLAIM, "t1") == "UPDATE 1"


async def test_the_previous_release_cannot_lease_a_watch_on_a_task_that_a_claim_holds(
    db: asyncpg.Connection,
) -> None:
    await claimed_task(db)
    await hold_claim(db)

    await db.execute(ROW_LEASE, "t1")

    row = await db.fetchrow(f"SELECT watch_token, token FROM {TASKS_WITH_CLAIMS}")
    assert row["watch_token"] is None and row["token"] is not None


async def test_an_expired_claim_does_not_hold_back_the_previous_release(
    db: asyncpg.Connection,
) -> None:
    await claimed_task(db)
    await hold_claim(db, "-1 second")

    assert await db.execute(ROW_CLAIM, "t1") == "UPDATE 1"


async def test_an_expired_claim_the_sweep_releases_while_a_follow_up_waits_is_logged_once(
    client: Client, db: asyncpg.Connection, database_url: str, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    await hold_claim(db, "-1 second")
    sweeper = await asyncpg.connect(direct_url(database_url))
    try:
        sweeping = sweeper.transaction()
        await sweeping.start()
        assert await sweeper.execute(SWEEP_EXPIRED_CLAIMS, SYSTEM_ACTOR, 10) == "INSERT 0 1"
        follow_up = asyncio.create_task(
            client.call("POST", agent.messages(task["id"]), {"text": "Rome"})
        )

        async def waiting() -> bool:
            found = await db.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND query LIKE '%a2a_claims%'"
            )
            return bool(found)

        await eventually(waiting, "the follow-up waits on the task row the sweep holds")
        await sweeping.commit()
        r = await follow_up
    finally:
        await sweeper.close()

    assert r.status == 200, r.raw
    logged = await events(client, agent, task["id"])
    assert [e["type"] for e in logged] == ["task_created", "task_continue_failed", "task_continued"]


async def test_a_late_outcome_is_recorded_only_while_its_claim_holds_the_task(
    db: asyncpg.Connection,
) -> None:
    row_id = await claimed_task(db)
    claim = await hold_claim(db)
    outcome = {"state": "completed", "event": "task_continued", "actor": "a", "data": {}}

    assert await record_claimed_outcome(db, row_id, uuid.uuid4(), **outcome) is None
    assert await db.fetchval("SELECT state FROM a2a_tasks WHERE id = $1", row_id) == (
        "input-required"
    )
    assert await record_claimed_outcome(db, row_id, claim, **outcome) == "completed"
    assert await db.fetchval("SELECT count(*) FROM a2a_claims") == 0
    assert await record_claimed_outcome(db, row_id, claim, **outcome) is None
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 1


async def test_a_late_outcome_is_recorded_when_the_claims_were_lost_and_the_task_is_unchanged(
    db: asyncpg.Connection,
) -> None:
    # The claims table is unlogged: a promoted standby (a failover) starts with no claims.
    row_id = await claimed_task(db)
    claim = await hold_claim(db)
    seq = await db.fetchval("SELECT last_seq FROM a2a_tasks WHERE id = $1", row_id)
    outcome = {"state": "completed", "event": "task_continued", "actor": "a", "data": {}}
    await db.execute("TRUNCATE a2a_claims")

    assert await record_claimed_outcome(db, row_id, claim, **outcome) is None
    assert await record_claimed_outcome(db, row_id, claim, **outcome, seen_seq=seq + 1) is None
    assert await record_claimed_outcome(db, row_id, claim, **outcome, seen_seq=seq) == "completed"
    # recorded once: the task has moved on since
    assert await record_claimed_outcome(db, row_id, claim, **outcome, seen_seq=seq) is None
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 1


async def test_a_late_outcome_is_not_recorded_when_another_follow_up_claimed_the_lost_claim_s_task(
    db: asyncpg.Connection,
) -> None:
    row_id = await claimed_task(db)
    claim = await hold_claim(db)
    seq = await db.fetchval("SELECT last_seq FROM a2a_tasks WHERE id = $1", row_id)
    outcome = {"state": "completed", "event": "task_continued", "actor": "a", "data": {}}
    await db.execute("TRUNCATE a2a_claims")
    await hold_claim(db)  # another follow-up's, taken after the claims were lost

    assert await record_claimed_outcome(db, row_id, claim, **outcome, seen_seq=seq) is None
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 0
