"""The caller's tasks across every agent they can see: ``GET /v1/a2a/tasks``.

Each filter shape (which of ``state``, ``agentId``, ``contextId``, ``owner`` are given, and
whether a cursor is) has its own statement, built once from fixed fragments: a filter that
is absent is not in the statement at all (no ``$n IS NULL OR …``), so every shape gets a
plan of its own that can walk an index in the listing order.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping

from a2a_continue.a2a.protocol import CANONICAL_STATES, canonical_state
from a2a_continue.core.access.callers import TASK_VISIBLE, Caller
from a2a_continue.core.shapes.pagination import cursor_param, encode_cursor, limit_param
from a2a_continue.core.tasks.models import TaskList
from a2a_continue.core.tasks.reads import TASK_COLUMNS, task_out
from a2a_continue.errors import Forbidden, InvalidQuery
from a2a_continue.runtime.db import Conn

# The filters in the order their values are bound (after the scoping's $1..$3).
FILTERS = (
    ("state", "t.state = ${n}"),
    ("agentId", "t.agent_id = ${n}::uuid"),
    ("contextId", "t.context_id = ${n}"),
    ("owner", "t.owner = ${n}"),
)

Shape = tuple[bool, ...]  # one flag per filter, then whether a cursor is given


def _statement(shape: Shape) -> str:
    """The statement of one filter shape."""
    where = [TASK_VISIBLE]
    n = 4
    for (_, fragment), given in zip(FILTERS, shape, strict=False):
        if given:
            where.append(fragment.format(n=n))
            n += 1
    if shape[-1]:
        where.append(f"(t.created_at, t.id) < (${n}::timestamptz, ${n + 1}::uuid)")
        n += 2
    return f"""
        SELECT {TASK_COLUMNS}
        FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
        WHERE {" AND ".join(where)}
        ORDER BY t.created_at DESC, t.id DESC
        LIMIT ${n}
        """


STATEMENTS: dict[Shape, str] = {
    shape: _statement(shape) for shape in itertools.product((False, True), repeat=len(FILTERS) + 1)
}


def _state_filter(params: Mapping[str, str]) -> str | None:
    raw = params.get("state")
    if raw is None:
        return None
    state = canonical_state(raw)
    if state == "unknown" and raw.strip().lower() != "unknown":
        raise InvalidQuery("state", f"must be one of {', '.join(CANONICAL_STATES)}")
    return state


def _agent_filter(params: Mapping[str, str]) -> uuid.UUID | None:
    raw = params.get("agentId")
    if raw is None:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise InvalidQuery("agentId", f"must be an agent id (a UUID), got {raw!r}") from None


def _owner_filter(caller: Caller, params: Mapping[str, str]) -> str | None:
    owner = params.get("owner")
    if owner is not None and not caller.is_admin:
        raise Forbidden("only an admin may list tasks by owner")
    return owner


async def list_all_tasks(conn: Conn, caller: Caller, params: Mapping[str, str]) -> TaskList:
    """List the caller's visible tasks of every agent, newest first, one page."""
    limit = limit_param(params)
    values = (
        _state_filter(params),
        _agent_filter(params),
        params.get("contextId"),
        _owner_filter(caller, params),
    )
    after_at, after_id = cursor_param(params)
    shape = (*(value is not None for value in values), after_at is not None)
    args = [
        *caller.scope_args(),
        *(value for value in values if value is not None),
        *((after_at, after_id) if after_at is not None else ()),
        limit + 1,
    ]
    rows = await conn.fetch(STATEMENTS[shape], *args)
    page = rows[:limit]
    more = len(rows) > limit
    cursor = encode_cursor(page[-1]["created_at"], page[-1]["row_id"]) if more else None
    return TaskList(tasks=[task_out(r) for r in page], next_cursor=cursor)


COUNT_TASKS = f"""
SELECT count(*) FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
WHERE t.agent_id = $4 AND {TASK_VISIBLE}
  AND ($5::text IS NULL OR t.state = $5) AND ($6::text IS NULL OR t.context_id = $6)
"""


async def count_agent_tasks(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, state: str | None, context_id: str | None
) -> int:
    """How many of one agent's tasks the caller sees (in ``state``, of ``context_id``)."""
    total: int = await conn.fetchval(COUNT_TASKS, *caller.scope_args(), agent_id, state, context_id)
    return total
