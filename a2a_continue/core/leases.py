"""Watch leases: which process follows a live task, taken and renewed in PostgreSQL.

A task is *live* while its stored state is ``submitted`` or ``working``, or while a send with
``returnImmediately`` waits for the agent to report a new status (``watch_past``). One process
at a time holds a task's lease (token + expiry); a lease that is not renewed expires, and any
process may then take it over. A follow-up claim and a watch lease never hold one task at once:
each statement that takes one refuses a task the other holds. A watch ends once the stored
task no longer needs it (``settled``), whoever wrote that state.
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import TASK, Update
from a2a_continue.core.snapshots import status_mark
from a2a_continue.core.tasks import TERMINAL_SQL, notify_sql
from a2a_continue.runtime.db import Conn, Record

LIVE_SQL = f"""t.state NOT IN {TERMINAL_SQL}
    AND (t.state IN ('submitted', 'working') OR t.watch_past IS NOT NULL)"""

# Nobody holds the task: no live lease and no live follow-up claim.
FREE_SQL = """(t.watch_token IS NULL OR t.watch_expires_at < now())
    AND (t.claim_token IS NULL OR t.claim_expires_at < now())"""

# What a watch needs: the task as stored, its lease, and how to reach its agent.
LEASED_COLUMNS = """t.id AS row_id, t.agent_id, t.task_id, t.state, t.status_message,
    t.artifacts, t.watch_token, t.watch_past,
    extract(epoch FROM now() - t.watch_started_at)::float8 AS watched_s,
    a.endpoint_url, a.protocol_version, a.auth_sealed, a.timeout_seconds, a.capabilities"""

# Take up to $1 live tasks nobody holds (free, or their holder's lease expired). SKIP LOCKED
# lets processes that pick up at the same moment share the tasks instead of waiting.
PICK_UP = f"""
WITH free AS (
    SELECT t.id FROM a2a_tasks t
    WHERE {LIVE_SQL} AND {FREE_SQL} AND t.watch_failed_at IS NULL
    ORDER BY t.updated_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE a2a_tasks t SET
    watch_token = gen_random_uuid(),
    watch_expires_at = now() + make_interval(secs => $2),
    watch_started_at = COALESCE(t.watch_started_at, now())
FROM free, a2a_agents a
WHERE t.id = free.id AND a.id = t.agent_id
RETURNING {LEASED_COLUMNS}
"""

# After a send: mark the task for watching (with the status to wait past when the send had
# returnImmediately), start the watch clock afresh, re-arm a watch that had given up, and take
# the lease for this process ($4; NULL when it has no room) when nobody holds the task.
HAND_OVER = f"""
UPDATE a2a_tasks t SET
    watch_past = $3,
    watch_started_at = now(),
    watch_failed_at = NULL,
    watch_token = CASE WHEN $4::uuid IS NOT NULL AND {FREE_SQL} THEN $4 ELSE t.watch_token END,
    watch_expires_at = CASE WHEN $4::uuid IS NOT NULL AND {FREE_SQL}
                            THEN now() + make_interval(secs => $5) ELSE t.watch_expires_at END
FROM a2a_agents a
WHERE t.agent_id = $1 AND t.task_id = $2 AND a.id = t.agent_id
  AND t.state NOT IN {TERMINAL_SQL}
  AND (t.state IN ('submitted', 'working') OR $3::jsonb IS NOT NULL)
RETURNING {LEASED_COLUMNS}
"""

# Also returns how each task stands as stored, so that a task settled by another writer (a
# cancel, a refresh) ends its watch even while the agent says nothing.
RENEW = """
UPDATE a2a_tasks t SET watch_expires_at = now() + make_interval(secs => $3)
FROM unnest($1::uuid[], $2::uuid[]) AS held (id, token)
WHERE t.id = held.id AND t.watch_token = held.token
RETURNING t.id, t.state, t.status_message, t.watch_past
"""

# Give leases back without ending the watch: another process takes the tasks at its next pick-up.
RELEASE = """
UPDATE a2a_tasks t SET watch_token = NULL, watch_expires_at = NULL
FROM unnest($1::uuid[], $2::uuid[]) AS held (id, token)
WHERE t.id = held.id AND t.watch_token = held.token
"""

FINISH = """
UPDATE a2a_tasks SET watch_token = NULL, watch_expires_at = NULL, watch_started_at = NULL,
    watch_past = NULL
WHERE id = $1 AND watch_token = $2
"""

# End the watch with `task_watch_failed` (the state unchanged); no pick-up takes the task
# again until a send re-arms it.
GIVE_UP = f"""
WITH gone AS (
    UPDATE a2a_tasks SET watch_token = NULL, watch_expires_at = NULL, watch_started_at = NULL,
        watch_past = NULL, watch_failed_at = now(), last_seq = last_seq + 1
    WHERE id = $1 AND watch_token = $2
    RETURNING id, last_seq, state
)
, failed AS (
    INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor, data)
    SELECT id, last_seq, 'task_watch_failed', state, state, $3, $4 FROM gone
    RETURNING task, seq
)
SELECT seq, {notify_sql("failed.task")} AS notified FROM failed
"""

FORGET_PAST = "UPDATE a2a_tasks SET watch_past = NULL WHERE id = $1 AND watch_token = $2"

STORED_STATUS = "SELECT state, status_message FROM a2a_tasks WHERE id = $1"


def settled(state: str, status_message: Any, past: dict[str, Any] | None) -> bool:
    """Tell whether a task stored so needs no more watching.

    A terminal task never does; an interrupted one does not unless it still shows the status
    a ``returnImmediately`` send was answered with (``past``, compared by state and message).
    """
    if protocol.is_terminal_task_state(state):
        return True
    if not protocol.is_interrupted_task_state(state):
        return False
    if past is None:
        return True
    mark = status_mark(Update(TASK, state=state, status_message=status_message))
    return (mark["state"], mark["message"]) != (past.get("state"), past.get("message"))


async def pick_up(conn: Conn, limit: int, lease_s: float) -> list[Record]:
    """Lease up to ``limit`` live tasks that nobody holds; return them with their agents."""
    return list(await conn.fetch(PICK_UP, limit, lease_s))


async def hand_over(
    conn: Conn,
    agent_id: uuid.UUID,
    task_id: str,
    past: dict[str, Any] | None,
    token: uuid.UUID | None,
    lease_s: float,
) -> Record | None:
    """Mark a task just sent to for watching; lease it with ``token`` when it is free.

    Returns the row (its ``watch_token`` says whether this process took it), or None when
    the task needs no watch.
    """
    row: Record | None = await conn.fetchrow(HAND_OVER, agent_id, task_id, past, token, lease_s)
    return row


async def renew(
    conn: Conn, held: dict[uuid.UUID, uuid.UUID], lease_s: float
) -> dict[uuid.UUID, bool]:
    """Extend the leases held (task row id → token); return the tasks still held, each with
    whether it is ``settled`` as stored."""
    rows = await conn.fetch(RENEW, list(held), list(held.values()), lease_s)
    return {
        row["id"]: settled(row["state"], row["status_message"], row["watch_past"]) for row in rows
    }


async def release(conn: Conn, held: dict[uuid.UUID, uuid.UUID]) -> None:
    """Give the leases back so that any process may take them at once."""
    await conn.execute(RELEASE, list(held), list(held.values()))


async def finish(conn: Conn, row_id: uuid.UUID, token: uuid.UUID) -> None:
    """End a watch whose task settled."""
    await conn.execute(FINISH, row_id, token)


async def give_up(
    conn: Conn, row_id: uuid.UUID, token: uuid.UUID, actor: str, data: dict[str, Any]
) -> bool:
    """End a watch with ``task_watch_failed``; False when the lease was no longer ours."""
    return await conn.fetchval(GIVE_UP, row_id, token, actor, data) is not None


async def forget_past(conn: Conn, row_id: uuid.UUID, token: uuid.UUID) -> None:
    """The agent reported a new status: any later interrupted one ends the watch."""
    await conn.execute(FORGET_PAST, row_id, token)


async def stored_settled(conn: Conn, row_id: uuid.UUID, past: dict[str, Any] | None) -> bool | None:
    """Tell whether the stored task is ``settled``; None when it no longer exists."""
    row = await conn.fetchrow(STORED_STATUS, row_id)
    return None if row is None else settled(row["state"], row["status_message"], past)
