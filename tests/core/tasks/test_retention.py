"""Retention: exactly the old terminal tasks go, with everything hanging off them."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import msgspec

from a2a_continue.core.access.callers import Caller
from a2a_continue.core.tasks import retention
from a2a_continue.core.tasks.claims import take_claim
from a2a_continue.core.tasks.store import append_event, record_outcome
from tests.support.database import insert_agent

ALICE = "alice@example.com"


async def task(
    db: asyncpg.Connection, agent: uuid.UUID, task_id: str, state: str, days_ago: int | None,
    events: int = 3,
) -> uuid.UUID:  # fmt: skip
    """A task of alice's in ``state``, completed that many days ago (None: not completed)."""
    row: uuid.UUID = await db.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, created_at, completed_at)"
        " VALUES ($1, $2, $3, $4, now() - interval '90 days',"
        " now() - make_interval(days => $5::int)) RETURNING id",
        agent,
        task_id,
        state,
        ALICE,
        days_ago,
    )
    for n in range(events):
        await append_event(db, row, "task_updated", state, state, ALICE, {"n": n})
    return row


async def test_the_prune_deletes_exactly_old_terminal_tasks_and_what_hangs_off_them(
    db: asyncpg.Connection, database_url: str
) -> None:
    agent = await insert_agent(db)
    old = [
        await task(db, agent, "old-done", "completed", 40),
        await task(db, agent, "old-failed", "failed", 31, events=25),
        await task(db, agent, "old-canceled", "canceled", 60),
        await task(db, agent, "old-rejected", "rejected", 45, events=1),
    ]
    kept = {
        await task(db, agent, "new-done", "completed", 1): 3,
        await task(db, agent, "old-waiting", "input-required", None): 3,
        await task(db, agent, "old-working", "working", None): 3,
    }
    live = await db.fetchval("SELECT id FROM a2a_tasks WHERE task_id = 'old-working'")
    # A stream waits on an old terminal task: its interest row hangs off it too.
    await db.execute(
        "INSERT INTO a2a_stream_interest (task, process, expires_at)"
        " VALUES ($1, gen_random_uuid(), now() + interval '1 minute')",
        old[0],
    )
    follow_up = await asyncpg.connect(database_url)
    for name in ("json", "jsonb"):
        await follow_up.set_type_codec(
            name,
            encoder=lambda v: msgspec.json.encode(v).decode(),
            decoder=msgspec.json.decode,
            schema="pg_catalog",
        )
    try:
        claim = uuid.uuid4()
        async with follow_up.transaction():
            # A follow-up on the live task claims it and runs while the prune does.
            caller = Caller(sub=ALICE)
            row = await take_claim(
                follow_up, caller, agent, "old-working", None, claim, timeout_s=30, margin_s=5
            )
            assert row is not None and row["claimed"]
            # Small batches: several statements, and the 25-event task goes alone.
            pruned = await asyncio.wait_for(retention.prune(db, 30, batch=2, event_budget=10), 20)
            await record_outcome(
                follow_up, live, state="completed", event="task_continued", actor=ALICE,
                data={}, claim=claim,
            )  # fmt: skip
    finally:
        await follow_up.close()
    assert (pruned.tasks, pruned.events) == (4, 3 + 25 + 3 + 1)
    remaining = await db.fetch("SELECT id, last_seq, claim_token FROM a2a_tasks")
    assert {r["id"] for r in remaining} == set(kept)
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events WHERE task = ANY($1)", old) == 0
    assert await db.fetchval("SELECT count(*) FROM a2a_stream_interest") == 0
    counts = dict(await db.fetch("SELECT task, count(*) FROM a2a_task_events GROUP BY task"))
    # The follow-up's outcome is recorded on the live task; the others' logs are whole.
    assert counts == {**kept, live: 4}
    assert await db.fetchval("SELECT state FROM a2a_tasks WHERE id = $1", live) == "completed"


async def test_a_dry_run_counts_what_the_prune_would_delete_and_deletes_nothing(
    db: asyncpg.Connection,
) -> None:
    agent = await insert_agent(db)
    await task(db, agent, "old-done", "completed", 40)
    await task(db, agent, "new-done", "completed", 1)
    due = await retention.due(db, 30)
    assert (due.tasks, due.events) == (1, 3)
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 2


async def test_no_prune_runs_while_another_process_holds_the_lease(
    db: asyncpg.Connection,
) -> None:
    agent = await insert_agent(db)
    await task(db, agent, "old-done", "completed", 40)
    await db.execute(
        "INSERT INTO a2a_chore_leases (chore, holder, expires_at)"
        " VALUES ('retention', gen_random_uuid(), now() + interval '1 minute')"
    )
    try:
        pruned = await retention.prune(db, 30)
        assert not pruned.ran
        assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 1
        # Once that lease has expired, the next run prunes.
        await db.execute("UPDATE a2a_chore_leases SET expires_at = now() - interval '1 second'")
        assert (await retention.prune(db, 30)).tasks == 1
    finally:
        await db.execute("DELETE FROM a2a_chore_leases")


async def test_the_prune_forgets_old_contexts_that_no_task_carries_any_more(
    db: asyncpg.Connection,
) -> None:
    agent = await insert_agent(db)
    await task(db, agent, "old-done", "completed", 40)
    await task(db, agent, "waiting", "input-required", None)
    await db.execute(
        "UPDATE a2a_tasks SET context_id = task_id || '-ctx' WHERE agent_id = $1", agent
    )
    for context_id, days_ago in [
        ("old-done-ctx", 60),  # its only task goes now
        ("waiting-ctx", 60),  # a task still carries it
        ("never-used", 60),  # named, but the agent answered without a task
        ("recent", 1),
    ]:
        await db.execute(
            "INSERT INTO a2a_contexts (agent_id, context_id, owner, created_at)"
            " VALUES ($1, $2, $3, now() - make_interval(days => $4::int))",
            agent,
            context_id,
            ALICE,
            days_ago,
        )

    await retention.prune(db, 30)

    left = await db.fetch("SELECT context_id FROM a2a_contexts ORDER BY context_id")
    assert [row["context_id"] for row in left] == ["recent", "waiting-ctx"]
