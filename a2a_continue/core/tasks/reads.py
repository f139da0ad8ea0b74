"""Tasks and their event log as callers see them: the scoped reads."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from a2a_continue.a2a.protocol import CANONICAL_STATES, canonical_state
from a2a_continue.core.access.callers import AGENT_VISIBLE, TASK_VISIBLE, Caller
from a2a_continue.core.shapes.pagination import (
    MAX_LIMIT,
    cursor_param,
    encode_cursor,
    int_param,
    limit_param,
)
from a2a_continue.core.tasks.models import EventList, EventOut, TaskList, TaskOut
from a2a_continue.errors import InvalidQuery, NotFound
from a2a_continue.runtime.db import Conn, Record

# The time of the task's status (sql/0013; a row from before it: its last update's).
STATUS_AT = "COALESCE(t.status_at, t.updated_at) AS status_at"

TASK_COLUMNS = f"""t.id AS row_id, t.agent_id, t.task_id, t.context_id, t.state,
    t.status_message, t.artifacts, t.owner, t.team_id, t.created_at, t.updated_at,
    t.completed_at, t.last_seq, {STATUS_AT}"""

# What a watch needs: the task as stored, its lease, and how to reach its agent.
LEASED_COLUMNS = """t.id AS row_id, t.agent_id, t.task_id, t.state, t.status_message,
    t.artifacts, t.watch_token, t.watch_past,
    extract(epoch FROM now() - t.watch_started_at)::float8 AS watched_s,
    a.endpoint_url, a.protocol_version, a.auth_sealed, a.timeout_seconds, a.capabilities"""

# Lock a task row for an update (see tasks.apply_update).
LOCK_TASK = f"SELECT {TASK_COLUMNS} FROM a2a_tasks t WHERE t.id = $1 FOR UPDATE"


async def lock_task(conn: Conn, row_id: uuid.UUID) -> Record | None:
    """Lock the task row until the transaction ends; return it (None: it is gone)."""
    row: Record | None = await conn.fetchrow(LOCK_TASK, row_id)
    return row


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


async def _require_visible_agent(conn: Conn, caller: Caller, agent_id: uuid.UUID) -> None:
    visible = await conn.fetchval(
        f"SELECT EXISTS (SELECT 1 FROM a2a_agents a WHERE a.id = $4 AND {AGENT_VISIBLE})",
        *caller.scope_args(),
        agent_id,
    )
    if not visible:
        raise NotFound(f"agent {agent_id} not found")


# One visible task by the agent's id and its task id, with what it takes to call the agent.
FIND_TASK = f"""
SELECT {TASK_COLUMNS}, a.endpoint_url, a.protocol_version, a.auth_sealed, a.timeout_seconds,
    a.capabilities
FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
WHERE t.agent_id = $4 AND t.task_id = $5 AND {TASK_VISIBLE}
"""

# A page of a task's events after a seq, by the primary key (task, seq).
LIST_EVENTS = """
SELECT seq, type, previous_state, new_state, actor, data, created_at
FROM a2a_task_events WHERE task = $1 AND seq > $2
ORDER BY seq LIMIT $3
"""


async def find_task(conn: Conn, caller: Caller, agent_id: uuid.UUID, task_id: str) -> Record:
    """Return the visible task row with its agent's columns, or raise 404."""
    row = await conn.fetchrow(FIND_TASK, *caller.scope_args(), agent_id, task_id)
    if row is None:
        raise NotFound(f"task {task_id} not found")
    return row


# Which of the task ids $5 name visible tasks of the agent.
VISIBLE_TASK_IDS = f"""
SELECT t.task_id FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
WHERE t.agent_id = $4 AND t.task_id = ANY($5::text[]) AND {TASK_VISIBLE}
"""


async def require_visible_tasks(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, task_ids: list[str]
) -> None:
    """Raise 404, as for one task, unless every id names a task of the agent the caller sees."""
    wanted = list(dict.fromkeys(task_ids))
    rows = await conn.fetch(VISIBLE_TASK_IDS, *caller.scope_args(), agent_id, wanted)
    seen = {row["task_id"] for row in rows}
    missing = next((task_id for task_id in wanted if task_id not in seen), None)
    if missing is not None:
        raise NotFound(f"referenced task {missing!r} not found")


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


def _list_statement(state: bool, context: bool, cursor: bool) -> str:
    """The page of an agent's tasks for one filter shape: only the conditions it has, so that
    each shape gets its own plan, walking its own index (sql/0009) newest first."""
    conditions = ["t.agent_id = $4", TASK_VISIBLE]
    n = 4
    if state:
        n += 1
        conditions.append(f"t.state = ${n}")
    if context:
        n += 1
        conditions.append(f"t.context_id = ${n}")
    if cursor:
        conditions.append(f"(t.created_at, t.id) < (${n + 1}::timestamptz, ${n + 2}::uuid)")
        n += 2
    where = "\n  AND ".join(conditions)
    return f"""SELECT {TASK_COLUMNS}
FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
WHERE {where}
ORDER BY t.created_at DESC, t.id DESC
LIMIT ${n + 1}"""


# One statement per shape: (state filter, contextId filter, cursor) → SQL; then the values
# are the caller's scope, the agent, the filters present, the cursor's two, the limit.
LIST_TASKS: dict[tuple[bool, bool, bool], str] = {
    (s, c, k): _list_statement(s, c, k)
    for s in (False, True)
    for c in (False, True)
    for k in (False, True)
}


async def list_tasks(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, params: Mapping[str, str]
) -> TaskList:
    """List the caller's visible tasks of one agent, newest first, one page."""
    rows, cursor = await list_task_rows(conn, caller, agent_id, params)
    return TaskList(tasks=[task_out(r) for r in rows], next_cursor=cursor)


async def list_task_rows(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, params: Mapping[str, str]
) -> tuple[list[Record], str | None]:
    """The rows of one page of ``list_tasks``, and the cursor of the next (None: the last)."""
    limit = limit_param(params)
    state = _state_filter(params)
    after_at, after_id = cursor_param(params)
    await _require_visible_agent(conn, caller, agent_id)
    context = params.get("contextId")
    shape = (state is not None, context is not None, after_at is not None)
    filters = [value for value in (state, context) if value is not None]
    keyset = [after_at, after_id] if after_at is not None else []
    statement = LIST_TASKS[shape]
    rows = await conn.fetch(statement, *caller.scope_args(), agent_id, *filters, *keyset, limit + 1)
    page = rows[:limit]
    more = len(rows) > limit
    cursor = encode_cursor(page[-1]["created_at"], page[-1]["row_id"]) if more else None
    return list(page), cursor


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
    rows = await conn.fetch(LIST_EVENTS, task["row_id"], after, limit)
    events = [EventOut(**dict(r)) for r in rows]
    return EventList(events=events, next_after=events[-1].seq if events else after)
