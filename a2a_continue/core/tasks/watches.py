"""Watch leases: the statements that pick up, hand over, renew and end a watcher's lease.

The rules are core/watch/leases'. A lease is columns of the task row, so its statements live
with the row's other writers, in core/tasks.
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.core.tasks.interest import notify_sql
from a2a_continue.core.tasks.reads import LEASED_COLUMNS
from a2a_continue.core.tasks.store import TERMINAL_SQL, append_events
from a2a_continue.runtime.db import Conn, Record

# ---- watch leases (their rules: core/watch/leases.py) -------------------------------------------

# Nobody holds the task: no live lease and no live follow-up claim (in `a2a_claims`, read with
# a snapshot of its own so that a statement that waited on a claimer's row lock sees its claim;
# or on the row, from a process of the previous release).
FREE_SQL = """(t.watch_token IS NULL OR t.watch_expires_at < now())
    AND (t.claim_token IS NULL OR t.claim_expires_at < now()) AND NOT a2a_claim_held(t.id)"""

# Take up to $1 live tasks nobody holds (free, or their holder's lease expired). SKIP LOCKED
# lets processes that pick up at the same moment share the tasks instead of waiting. A task
# is live while submitted or working, or while a returnImmediately send waits past a status.
PICK_UP = f"""
WITH free AS (
    SELECT t.id FROM a2a_tasks t WHERE t.state NOT IN {TERMINAL_SQL}
    AND (t.state IN ('submitted', 'working') OR t.watch_past IS NOT NULL)
    AND {FREE_SQL} AND t.watch_failed_at IS NULL
    ORDER BY t.updated_at LIMIT $1 FOR UPDATE SKIP LOCKED
)
UPDATE a2a_tasks t SET watch_token = gen_random_uuid(),
    watch_expires_at = now() + make_interval(secs => $2),
    watch_started_at = COALESCE(t.watch_started_at, now())
FROM free, a2a_agents a WHERE t.id = free.id AND a.id = t.agent_id
RETURNING {LEASED_COLUMNS}
"""

# After a send: mark the task for watching (with the status to wait past when the send had
# returnImmediately), start the watch clock afresh, re-arm a watch that had given up, and take
# the lease for this process ($4; NULL when it has no room) when nobody holds the task.
HAND_OVER = f"""
UPDATE a2a_tasks t SET watch_past = $3, watch_started_at = now(), watch_failed_at = NULL,
    watch_token = CASE WHEN $4::uuid IS NOT NULL AND {FREE_SQL} THEN $4 ELSE t.watch_token END,
    watch_expires_at = CASE WHEN $4::uuid IS NOT NULL AND {FREE_SQL}
                            THEN now() + make_interval(secs => $5) ELSE t.watch_expires_at END
FROM a2a_agents a
WHERE t.agent_id = $1 AND t.task_id = $2 AND a.id = t.agent_id AND t.state NOT IN {TERMINAL_SQL}
  AND (t.state IN ('submitted', 'working') OR $3::jsonb IS NOT NULL)
RETURNING {LEASED_COLUMNS}
"""

# Also returns how each task stands as stored, so that a task settled by another writer (a
# cancel, a refresh) ends its watch even while the agent says nothing.
RENEW = """UPDATE a2a_tasks t SET watch_expires_at = now() + make_interval(secs => $3)
FROM unnest($1::uuid[], $2::uuid[]) AS held (id, token)
WHERE t.id = held.id AND t.watch_token = held.token
RETURNING t.id, t.state, t.status_message, t.watch_past"""

# Give leases back without ending the watch: another process takes the tasks at its next pick-up.
RELEASE = """UPDATE a2a_tasks t SET watch_token = NULL, watch_expires_at = NULL
FROM unnest($1::uuid[], $2::uuid[]) AS held (id, token)
WHERE t.id = held.id AND t.watch_token = held.token"""

FINISH = """UPDATE a2a_tasks SET watch_token = NULL, watch_expires_at = NULL,
    watch_started_at = NULL, watch_past = NULL WHERE id = $1 AND watch_token = $2"""

# End the watch with `task_watch_failed` (state unchanged): no pick-up takes it till a send.
GIVE_UP = f"""
WITH gone AS (
    UPDATE a2a_tasks SET watch_token = NULL, watch_expires_at = NULL, watch_started_at = NULL,
        watch_past = NULL, watch_failed_at = now(), last_seq = last_seq + 1
    WHERE id = $1 AND watch_token = $2 RETURNING id, last_seq, state
), failed AS (
    {append_events("id, last_seq, 'task_watch_failed', state, state, $3, $4, NULL", "gone")}
    RETURNING task, seq
)
SELECT seq, {notify_sql("failed.task")} AS notified FROM failed
"""

FORGET_PAST = "UPDATE a2a_tasks SET watch_past = NULL WHERE id = $1 AND watch_token = $2"


async def pick_up_watches(conn: Conn, limit: int, lease_s: float) -> list[Record]:
    """Lease up to ``limit`` live tasks that nobody holds; return them with their agents."""
    return list(await conn.fetch(PICK_UP, limit, lease_s))


async def hand_over_watch(
    conn: Conn, agent_id: uuid.UUID, task_id: str, past: dict[str, Any] | None,
    token: uuid.UUID | None, lease_s: float,
) -> Record | None:  # fmt: skip
    """Mark a task just sent to for watching, leased with ``token`` when free; return its row
    (``watch_token`` says who holds it), or None when it needs no watch."""
    row: Record | None = await conn.fetchrow(HAND_OVER, agent_id, task_id, past, token, lease_s)
    return row


async def renew_watches(
    conn: Conn, held: dict[uuid.UUID, uuid.UUID], lease_s: float
) -> list[Record]:
    """Extend the leases held (task row id → token); return each task still held, as stored."""
    return list(await conn.fetch(RENEW, list(held), list(held.values()), lease_s))


async def release_watches(conn: Conn, held: dict[uuid.UUID, uuid.UUID]) -> None:
    """Give the leases back so that any process may take them at once."""
    await conn.execute(RELEASE, list(held), list(held.values()))


async def finish_watch(conn: Conn, row_id: uuid.UUID, token: uuid.UUID) -> None:
    """End a watch whose task settled."""
    await conn.execute(FINISH, row_id, token)


async def give_up_watch(
    conn: Conn, row_id: uuid.UUID, token: uuid.UUID, actor: str, data: dict[str, Any]
) -> bool:
    """End a watch with ``task_watch_failed``; False when the lease was no longer ours."""
    return await conn.fetchval(GIVE_UP, row_id, token, actor, data) is not None


async def forget_watch_past(conn: Conn, row_id: uuid.UUID, token: uuid.UUID) -> None:
    """The agent reported a new status: any later interrupted one ends the watch."""
    await conn.execute(FORGET_PAST, row_id, token)
