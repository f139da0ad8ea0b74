"""Retention (§14): terminal tasks completed before a cutoff are deleted with everything that
hangs off them (events, stream interest, push configs and deliveries: their foreign keys
cascade), a batch at a time, by one process at a time; so are the contexts callers named
before the cutoff that no task carries any more (``core/tasks/contexts``).

A batch is one statement: at most ``batch`` tasks, and no more events than ``event_budget``
in all (a task with a longer log goes alone), so each statement's time and locks stay
bounded. Tasks locked at that moment (a follow-up's claim being taken) are skipped, and a
task is deleted only while it is terminal and completed before the cutoff: a live task is
never touched.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from a2a_continue.core.tasks.contexts import prune_contexts
from a2a_continue.core.tasks.store import TERMINAL_SQL
from a2a_continue.runtime.db import Conn

CHORE = "retention"

# The terminal tasks completed before $1, oldest first (the a2a_tasks_completed index).
_DUE = f"t.completed_at < $1 AND t.state IN {TERMINAL_SQL}"

PRUNE_BATCH = f"""
WITH due AS (
    SELECT t.id, t.last_seq, t.completed_at FROM a2a_tasks t
    WHERE {_DUE}
    ORDER BY t.completed_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED
), sized AS (
    SELECT id, sum(last_seq) OVER (ORDER BY completed_at, id) AS events_so_far,
           row_number() OVER (ORDER BY completed_at, id) AS n
    FROM due
), gone AS (
    DELETE FROM a2a_tasks t USING sized
    WHERE t.id = sized.id AND (sized.events_so_far <= $3 OR sized.n = 1) AND {_DUE}
    RETURNING t.last_seq
)
SELECT count(*) AS tasks, COALESCE(sum(last_seq), 0)::bigint AS events FROM gone
"""

COUNT_DUE = f"""SELECT count(*) AS tasks, COALESCE(sum(t.last_seq), 0)::bigint AS events
FROM a2a_tasks t WHERE {_DUE}"""

# Take (or renew) the chore's lease for $2 for $3 seconds, when free, expired or ours.
TAKE_LEASE = """INSERT INTO a2a_chore_leases (chore, holder, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3))
ON CONFLICT (chore) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE a2a_chore_leases.holder = EXCLUDED.holder OR a2a_chore_leases.expires_at < now()
RETURNING holder"""

DROP_LEASE = "DELETE FROM a2a_chore_leases WHERE chore = $1 AND holder = $2"

CUTOFF = "SELECT now() - make_interval(secs => $1 * 86400.0)"


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one run removed (or, dry, would remove)."""

    tasks: int
    events: int
    ran: bool = True  # False: another process held the lease


async def due(conn: Conn, older_than_days: float) -> Pruned:
    """Count the terminal tasks (and their events) a run would delete now."""
    cutoff = await conn.fetchval(CUTOFF, older_than_days)
    row = await conn.fetchrow(COUNT_DUE, cutoff)
    assert row is not None
    return Pruned(int(row["tasks"]), int(row["events"]))


async def prune(
    conn: Conn,
    older_than_days: float,
    *,
    batch: int = 500,
    event_budget: int = 20_000,
    lease_s: float = 300.0,
) -> Pruned:
    """Delete the terminal tasks completed more than ``older_than_days`` ago, batch after
    batch, while holding the retention lease; nothing when another process holds it."""
    holder = uuid.uuid4()
    if await conn.fetchval(TAKE_LEASE, CHORE, holder, lease_s) is None:
        return Pruned(0, 0, ran=False)
    tasks = events = 0
    try:
        # One cutoff for the whole run: tasks completing meanwhile wait for the next.
        cutoff = await conn.fetchval(CUTOFF, older_than_days)
        while True:
            row = await conn.fetchrow(PRUNE_BATCH, cutoff, batch, event_budget)
            assert row is not None
            tasks, events = tasks + int(row["tasks"]), events + int(row["events"])
            if row["tasks"] == 0:
                break
            if await conn.fetchval(TAKE_LEASE, CHORE, holder, lease_s) is None:
                break  # our lease ran out and another process took over
        # Contexts named before the cutoff that none of their agent's tasks carries any more.
        await prune_contexts(conn, cutoff, batch)
    finally:
        await conn.execute(DROP_LEASE, CHORE, holder)
    return Pruned(tasks, events)
