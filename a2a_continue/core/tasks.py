"""Tasks and their event log: the SQL, and the read use cases."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from a2a_continue.a2a.protocol import CANONICAL_STATES, AgentTask, canonical_state
from a2a_continue.core.callers import AGENT_VISIBLE, TASK_VISIBLE, Caller
from a2a_continue.core.models import EventList, EventOut, TaskList, TaskOut
from a2a_continue.core.pagination import (
    MAX_LIMIT,
    cursor_param,
    encode_cursor,
    int_param,
    limit_param,
)
from a2a_continue.errors import InvalidQuery, NotFound
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.hub import EVENTS_CHANNEL

TERMINAL_SQL = "('completed', 'canceled', 'failed', 'rejected')"


def notify_sql(task_expr: str) -> str:
    """SQL notifying the events channel with the task ``task_expr`` names, if a stream waits.

    Only a task with an unexpired row in `a2a_stream_interest` (each process's hub keeps one
    per task its streams wait on) is notified: a NOTIFY holds a database-wide lock until its
    commit is flushed, so notifying commits queue behind each other, and most tasks have no
    stream waiting. The value is NULL either way. Qualify ``task_expr`` (``appended.task``):
    a bare ``task`` would name the interest row's own column inside the subquery.
    """
    return (
        "CASE WHEN EXISTS (SELECT 1 FROM a2a_stream_interest i"
        f" WHERE i.task = {task_expr} AND i.expires_at > now())"
        f" THEN pg_notify('{EVENTS_CHANNEL}', {task_expr}::text) END"
    )


TASK_COLUMNS = """t.id AS row_id, t.agent_id, t.task_id, t.context_id, t.state,
    t.status_message, t.artifacts, t.owner, t.team_id, t.created_at, t.updated_at,
    t.completed_at, t.last_seq"""


def task_out(row: Record) -> TaskOut:
    """Shape a task row for callers."""
    return TaskOut(
        agent_id=row["agent_id"],
        id=row["task_id"],
        context_id=row["context_id"],
        state=row["state"],
        status_message=row["status_message"],
        artifacts=row["artifacts"],
        owner=row["owner"],
        team_id=row["team_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        completed_at=row["completed_at"],
        last_seq=row["last_seq"],
    )


# ---- writes -------------------------------------------------------------------------------

APPEND_EVENT = f"""
WITH next AS (
    UPDATE a2a_tasks SET last_seq = last_seq + 1 WHERE id = $1 RETURNING id, last_seq
), appended AS (
    INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor, data)
    SELECT id, last_seq, $2, $3, $4, $5, $6 FROM next
    RETURNING task, seq
)
SELECT seq, {notify_sql("appended.task")} AS notified FROM appended
"""


async def append_event(
    conn: Conn,
    row_id: uuid.UUID,
    kind: str,
    previous_state: str | None,
    new_state: str | None,
    actor: str,
    data: dict[str, Any],
) -> int:
    """Append one event with the task's next sequence number (safe under concurrency)."""
    seq = await conn.fetchval(APPEND_EVENT, row_id, kind, previous_state, new_state, actor, data)
    if seq is None:
        raise NotFound("the task no longer exists")
    return int(seq)


# An existing row a new task's claim may take: no claim (an expired one is left to the sweep,
# which logs it) and no live watch lease.
_CLAIMABLE = """EXCLUDED.claim_token IS NOT NULL AND t.claim_token IS NULL
    AND (t.watch_token IS NULL OR t.watch_expires_at < now())"""

# Insert the task an agent reported, or refresh the caller's own row of it (another caller's
# row is left alone); a terminal state is never overwritten. A new row starts its log with
# `task_created` (seq 1) in the same statement. That event notifies nobody: no stream can wait
# on a row the statement creates (see notify_sql). A streamed start takes the task's claim
# here ($10 for $11 s; NULL takes none), so that no watch lease is taken while its stream runs;
# an existing row is claimed only when nobody holds it.
RECORD_NEW_TASK = f"""
WITH up AS (
    INSERT INTO a2a_tasks AS t (agent_id, task_id, context_id, state, status_message,
        artifacts, owner, team_id, completed_at, last_seq, claim_token, claim_expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
        CASE WHEN $4 IN {TERMINAL_SQL} THEN now() END, 1,
        $10::uuid, CASE WHEN $10::uuid IS NOT NULL THEN now() + make_interval(secs => $11) END)
    ON CONFLICT (agent_id, task_id) DO UPDATE SET
        claim_token = CASE WHEN {_CLAIMABLE} THEN EXCLUDED.claim_token ELSE t.claim_token END,
        claim_expires_at = CASE WHEN {_CLAIMABLE} THEN EXCLUDED.claim_expires_at
                                ELSE t.claim_expires_at END,
        state = CASE WHEN t.state IN {TERMINAL_SQL} THEN t.state ELSE EXCLUDED.state END,
        status_message = CASE WHEN t.state IN {TERMINAL_SQL} THEN t.status_message
                              ELSE EXCLUDED.status_message END,
        artifacts = CASE WHEN t.state IN {TERMINAL_SQL} THEN t.artifacts
                         ELSE EXCLUDED.artifacts END,
        completed_at = CASE WHEN t.state IN {TERMINAL_SQL} THEN t.completed_at
                            ELSE EXCLUDED.completed_at END,
        context_id = COALESCE(t.context_id, EXCLUDED.context_id),
        updated_at = now()
    WHERE t.owner = EXCLUDED.owner
    RETURNING t.id, t.state, (xmax = 0) AS inserted
), created AS (
    INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor, data)
    SELECT id, 1, 'task_created', NULL, state, $7, $9 FROM up WHERE inserted
)
SELECT id, state, inserted FROM up
"""


async def record_new_task(
    conn: Conn,
    agent_id: uuid.UUID,
    task: AgentTask,
    owner: str,
    team_id: str | None,
    data: dict[str, Any],
    claim: uuid.UUID | None = None,
    claim_s: float = 0.0,
) -> str | None:
    """Store a task the agent reported for ``owner`` (with ``claim``: claimed for ``claim_s``);
    return its stored state.

    None means the agent's task id is already recorded for another caller.
    """
    row = await conn.fetchrow(
        RECORD_NEW_TASK,
        agent_id,
        task.id,
        task.context_id,
        task.state,
        task.status_message,
        task.artifacts,
        owner,
        team_id,
        data,
        claim,
        claim_s,
    )
    return None if row is None else str(row["state"])


# Apply an outcome to a task: the new state (NULL keeps it; a terminal state is kept too),
# the release of the caller's claim ($5), and one event ($7-$9) whose seq comes from the
# same row update ($6 = 1; 0 when the event is left out).
_OUTCOME_UPDATE = f"""
prev AS (
    SELECT id, state FROM a2a_tasks WHERE id = $1 FOR UPDATE
), upd AS (
    UPDATE a2a_tasks t SET
        state = CASE WHEN $2::text IS NULL OR t.state IN {TERMINAL_SQL} THEN t.state
                     ELSE $2 END,
        status_message = CASE WHEN $2::text IS NULL OR t.state IN {TERMINAL_SQL}
                              THEN t.status_message ELSE $3 END,
        artifacts = CASE WHEN $4::jsonb IS NULL OR t.state IN {TERMINAL_SQL}
                         THEN t.artifacts ELSE $4 END,
        completed_at = CASE WHEN t.state NOT IN {TERMINAL_SQL} AND $2 IN {TERMINAL_SQL}
                            THEN now() ELSE t.completed_at END,
        updated_at = now(),
        last_seq = t.last_seq + $6,
        claim_token = CASE WHEN t.claim_token = $5 THEN NULL ELSE t.claim_token END,
        claim_expires_at = CASE WHEN t.claim_token = $5 THEN NULL ELSE t.claim_expires_at END
    FROM prev WHERE t.id = prev.id
    RETURNING {TASK_COLUMNS}, prev.state AS previous
)"""

RECORD_OUTCOME = f"""
WITH {_OUTCOME_UPDATE}, event AS (
    INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor, data)
    SELECT row_id, last_seq, $7, previous, state, $8, $9 FROM upd
)
SELECT upd.*, {notify_sql("upd.row_id")} AS notified FROM upd
"""

# The same outcome without its event: used when the event write itself failed.
RECORD_OUTCOME_ONLY = f"""
WITH {_OUTCOME_UPDATE}
SELECT * FROM upd
"""


async def record_outcome(
    conn: Conn,
    row_id: uuid.UUID,
    *,
    state: str | None,
    status_message: dict[str, Any] | None = None,
    artifacts: list[Any] | None = None,
    event: str,
    actor: str,
    data: dict[str, Any],
    claim: uuid.UUID | None = None,
    with_event: bool = True,
) -> Record:
    """Apply an outcome and append its event in one statement; return the task row."""
    update = (row_id, state, status_message, artifacts, claim)
    if with_event:
        row = await conn.fetchrow(RECORD_OUTCOME, *update, 1, event, actor, data)
    else:
        row = await conn.fetchrow(RECORD_OUTCOME_ONLY, *update, 0)
    if row is None:
        raise NotFound("the task no longer exists")
    return row


# ---- reads --------------------------------------------------------------------------------


async def _require_visible_agent(conn: Conn, caller: Caller, agent_id: uuid.UUID) -> None:
    visible = await conn.fetchval(
        f"SELECT EXISTS (SELECT 1 FROM a2a_agents a WHERE a.id = $4 AND {AGENT_VISIBLE})",
        *caller.scope_args(),
        agent_id,
    )
    if not visible:
        raise NotFound(f"agent {agent_id} not found")


async def find_task(conn: Conn, caller: Caller, agent_id: uuid.UUID, task_id: str) -> Record:
    """Return the visible task row with its agent's columns, or raise 404."""
    row = await conn.fetchrow(
        f"""
        SELECT {TASK_COLUMNS}, a.endpoint_url, a.protocol_version, a.auth_sealed,
               a.timeout_seconds
        FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
        WHERE t.agent_id = $4 AND t.task_id = $5 AND {TASK_VISIBLE}
        """,
        *caller.scope_args(),
        agent_id,
        task_id,
    )
    if row is None:
        raise NotFound(f"task {task_id} not found")
    return row


async def get_task(conn: Conn, caller: Caller, agent_id: uuid.UUID, task_id: str) -> TaskOut:
    """Return one visible task."""
    return task_out(await find_task(conn, caller, agent_id, task_id))


def _state_filter(params: Mapping[str, str]) -> str | None:
    raw = params.get("state")
    if raw is None:
        return None
    state = canonical_state(raw)
    if state == "unknown" and raw.strip().lower() != "unknown":
        msg = f"must be one of {', '.join(CANONICAL_STATES)}"
        raise InvalidQuery("state", msg)
    return state


async def list_tasks(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, params: Mapping[str, str]
) -> TaskList:
    """List the caller's visible tasks of one agent, newest first, one page."""
    limit = limit_param(params)
    state = _state_filter(params)
    after_at, after_id = cursor_param(params)
    await _require_visible_agent(conn, caller, agent_id)
    rows = await conn.fetch(
        f"""
        SELECT {TASK_COLUMNS}
        FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
        WHERE t.agent_id = $4 AND {TASK_VISIBLE}
          AND ($5::text IS NULL OR t.state = $5)
          AND ($6::text IS NULL OR t.context_id = $6)
          AND ($7::timestamptz IS NULL OR (t.created_at, t.id) < ($7, $8::uuid))
        ORDER BY t.created_at DESC, t.id DESC
        LIMIT $9
        """,
        *caller.scope_args(),
        agent_id,
        state,
        params.get("contextId"),
        after_at,
        after_id,
        limit + 1,
    )
    page = rows[:limit]
    more = len(rows) > limit
    cursor = encode_cursor(page[-1]["created_at"], page[-1]["row_id"]) if more else None
    return TaskList(tasks=[task_out(r) for r in page], next_cursor=cursor)


async def list_events(
    conn: Conn,
    caller: Caller,
    agent_id: uuid.UUID,
    task_id: str,
    params: Mapping[str, str],
) -> EventList:
    """Return a visible task's events with seq > after, ascending."""
    after = int_param(params, "after", 0, 0, 2**31 - 1)
    limit = int_param(params, "limit", MAX_LIMIT, 1, 1000)
    task = await find_task(conn, caller, agent_id, task_id)
    rows = await conn.fetch(
        """
        SELECT seq, type, previous_state, new_state, actor, data, created_at
        FROM a2a_task_events WHERE task = $1 AND seq > $2
        ORDER BY seq LIMIT $3
        """,
        task["row_id"],
        after,
        limit,
    )
    events = [EventOut(**dict(r)) for r in rows]
    return EventList(events=events, next_after=events[-1].seq if events else after)
