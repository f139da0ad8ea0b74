"""The task store: new tasks, events, outcomes and updates in `a2a_tasks` and `a2a_task_events`.

With claims (follow-up claims) and watches (watch leases) beside it, the only writers of those
tables. Rules stay with the callers (continuation, leases, updates); one fragment writes every
event.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from a2a_continue.a2a.protocol import CANONICAL_STATES, TERMINAL_STATES, AgentTask
from a2a_continue.core.tasks.interest import notify_sql
from a2a_continue.core.tasks.reads import STATUS_AT, TASK_COLUMNS
from a2a_continue.errors import NotFound
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.hub import PUSH_CHANNEL

# Who writes the events no caller asked for (an expired claim, a watch): the gateway itself.
SYSTEM_ACTOR = "a2a-continue"
TERMINAL_SQL = "(" + ", ".join(f"'{s}'" for s in CANONICAL_STATES if s in TERMINAL_STATES) + ")"

# The kinds of event the log holds. The two hot tables have no CHECK constraints (see
# sql/0011_lean_writes.sql): the functions below refuse any other kind or state before a
# statement is sent; the statements' own kinds are constants of this list.
EVENT_TYPES = frozenset(
    {"task_created", "task_continued", "task_continue_failed", "task_canceled",
     "task_redirected", "task_updated", "task_watch_failed"}
)  # fmt: skip
_STATES = frozenset(CANONICAL_STATES)


def _checked(event: str, *states: str | None) -> None:
    """Refuse an unknown event kind or a state that is not canonical (a bug, not bad input:
    answers are mapped to canonical states when they are read)."""
    if event not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event!r}")
    for state in states:
        if state is not None and state not in _STATES:
            raise ValueError(f"not a canonical task state: {state!r}")


def append_events(values: str, rows: str) -> str:
    """SQL appending an event per row of ``rows`` (``values``: task, seq, type, previous and
    new state, actor, data, and what its push deliveries are built from: `pushed_when`, or
    NULL); the seq is the `last_seq` the statement's own update of the task row returned (1
    for a row it inserts), so that concurrent writers never share one."""
    return (
        "INSERT INTO a2a_task_events"
        " (task, seq, type, previous_state, new_state, actor, data, pushed)"
        f"\n    SELECT {values} FROM {rows}"
    )


# The kinds of event a push config is owed (SPEC §12): a new task, a follow-up's answer (not
# a JSON-RPC error), an update, a cancel.
PUSHED_TYPES = ("task_created", "task_continued", "task_updated", "task_canceled")

# What an update of a task row returns for its events' push deliveries (sql/0017): the task as
# the statement leaves it, when it has an enabled push config; else NULL.
PUSH_SNAPSHOT = """CASE WHEN t.push_enabled THEN jsonb_build_object('state', t.state,
        'statusMessage', t.status_message, 'artifacts', t.artifacts) END AS pushed"""


def owes_push(kind: str, data: str) -> str:
    """SQL: whether an event of kind ``kind`` with ``data`` is owed to push configs."""
    kinds = ", ".join(f"'{k}'" for k in PUSHED_TYPES)
    return f"{kind} IN ({kinds}) AND NOT ({kind} = 'task_continued' AND {data} ? 'error')"


def pushed_when(kind: str, data: str) -> str:
    """The event's `pushed` value: the row's ``pushed`` (``PUSH_SNAPSHOT``) for an event push
    configs are owed, else NULL. The event log is the outbox: the dispatchers send from it
    (core/push/outbox.py)."""
    return f"CASE WHEN {owes_push(kind, data)} THEN pushed END"


def push_wake_sql(pushed: str) -> str:
    """SQL notifying the push dispatchers, while one says it waits (sql/0017: until a time it
    looks again by anyway), of an event of a task with a push config (``pushed``: the row's
    ``PUSH_SNAPSHOT``). Read only for such a task; the dispatcher that wakes clears the flag,
    so a busy cluster gets no notification at all."""
    return (
        f"CASE WHEN {pushed} IS NOT NULL"
        " AND (SELECT w.sleeping AND w.until > now() FROM a2a_push_wake w)"
        f" THEN pg_notify('{PUSH_CHANNEL}', '') END"
    )


@dataclass(frozen=True, slots=True)
class Stored:
    """A task's state after a write, and the time of its status (None: not read back)."""

    state: str
    status_at: dt.datetime | None = None


# ---- events and new tasks -----------------------------------------------------------------

# The `pushed` value of each statement's event below, from its kind and data parameters.
_PUSHED_ARG = pushed_when("$2::text", "$6::jsonb")
_PUSHED_OUTCOME = pushed_when("$7::text", "$9::jsonb")
_PUSHED_UPDATE = pushed_when("$5::text", "$8::jsonb")
_WAKE = push_wake_sql("upd.pushed")

APPEND_EVENT = f"""
WITH next AS (
    UPDATE a2a_tasks t SET last_seq = t.last_seq + 1 WHERE t.id = $1
    RETURNING t.id, t.last_seq, {PUSH_SNAPSHOT}
), appended AS (
    {append_events(f"id, last_seq, $2, $3, $4, $5, $6, {_PUSHED_ARG}", "next")}
    RETURNING task, seq
)
SELECT seq, {notify_sql("appended.task")} AS notified, {push_wake_sql("next.pushed")} AS woke
FROM appended, next
"""


async def append_event(
    conn: Conn, row_id: uuid.UUID, kind: str, previous_state: str | None, new_state: str | None,
    actor: str, data: dict[str, Any],
) -> int:  # fmt: skip
    """Append one event with the task's next sequence number (safe under concurrency)."""
    _checked(kind, previous_state, new_state)
    seq = await conn.fetchval(APPEND_EVENT, row_id, kind, previous_state, new_state, actor, data)
    if seq is None:
        raise NotFound("the task no longer exists")
    return int(seq)


# An existing row a new task's claim may take: no claim on the row (a previous release's) and
# no live watch lease; a claim in `a2a_claims`, even an expired one (left to the sweep, which
# logs it), keeps its row there.
_CLAIMABLE = "t.claim_token IS NULL AND (t.watch_token IS NULL OR t.watch_expires_at < now())"

_KEEP_TERMINAL = ",\n        ".join(
    f"{c} = CASE WHEN t.state IN {TERMINAL_SQL} THEN t.{c} ELSE EXCLUDED.{c} END"
    for c in ("state", "status_message", "artifacts", "completed_at")
)


def status_time(state: str, message: str, given: str = "true") -> str:
    """The new time of a task's status (sql/0013): now when the write (when ``given``) changes a
    live task's state or status message to ``state`` / ``message``, else the time it had."""
    return f"""CASE WHEN {given} AND t.state NOT IN {TERMINAL_SQL}
            AND (t.state IS DISTINCT FROM {state} OR t.status_message IS DISTINCT FROM {message})
            THEN now() ELSE COALESCE(t.status_at, t.updated_at) END"""


# Insert the task an agent reported, or refresh the caller's own row of it (another caller's
# row is left alone); a terminal state is never overwritten. A new row starts its log with
# `task_created` (seq 1), which notifies nobody: no stream can wait on a row just created.
# A streamed start takes the task's claim here ($10 for $11 s; NULL takes none), so that no
# watch lease is taken while its stream runs; an existing row only when nobody holds it.
RECORD_NEW_TASK = f"""
WITH up AS (
    INSERT INTO a2a_tasks AS t (agent_id, task_id, context_id, state, status_message,
        artifacts, owner, team_id, completed_at, last_seq, status_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $4 IN {TERMINAL_SQL} THEN now() END, 1,
        now())
    ON CONFLICT (agent_id, task_id) DO UPDATE SET
        status_at = {status_time("EXCLUDED.state", "EXCLUDED.status_message")},
        {_KEEP_TERMINAL},
        context_id = COALESCE(t.context_id, EXCLUDED.context_id), updated_at = now()
    WHERE t.owner = EXCLUDED.owner
    RETURNING t.id, t.state, (xmax = 0) AS inserted, {_CLAIMABLE} AS claimable, {STATUS_AT}
), created AS (
    {append_events("id, 1, 'task_created', NULL, state, $7, $9, NULL", "up WHERE inserted")}
), claimed AS (
    INSERT INTO a2a_claims (task, token, expires_at)
    SELECT id, $10::uuid, now() + make_interval(secs => $11) FROM up
    WHERE $10::uuid IS NOT NULL AND (inserted OR claimable)
    ON CONFLICT (task) DO NOTHING
)
SELECT id, state, inserted, status_at FROM up
"""


async def record_new_task(
    conn: Conn, agent_id: uuid.UUID, task: AgentTask, owner: str, team_id: str | None,
    data: dict[str, Any], claim: uuid.UUID | None = None, claim_s: float = 0.0,
) -> Record | None:  # fmt: skip
    """Store a task the agent reported for ``owner`` (with ``claim``: claimed for ``claim_s``);
    return its row's id, stored state and status time, or None when the task id is recorded
    for another caller."""
    _checked("task_created", task.state)
    args = (task.id, task.context_id, task.state, task.status_message, task.artifacts, owner)
    row: Record | None = await conn.fetchrow(
        RECORD_NEW_TASK, agent_id, *args, team_id, data, claim, claim_s
    )
    return row


# ---- outcomes and updates -----------------------------------------------------------------

# A task that turns terminal ($2) completes now.
_COMPLETED_AT = f"""completed_at = CASE WHEN t.state NOT IN {TERMINAL_SQL} AND $2 IN {TERMINAL_SQL}
                            THEN now() ELSE t.completed_at END"""

# Apply an outcome to a task: the new state (NULL keeps it; a terminal state is kept too),
# the release of the caller's claim ($5), and one event ($7-$9) whose seq comes from the
# same row update ($6 = 1; 0 when the event is left out). The update changes no indexed
# column unless the state changes, so it usually stays on the row's page (HOT). The event's
# previous state is the row's as the update found it: on PostgreSQL 18 and later the update
# returns it (`old.state`); before, the statement first locks the row and reads it.
_OUTCOME_SET = f"""
        state = CASE WHEN $2::text IS NULL OR t.state IN {TERMINAL_SQL} THEN t.state ELSE $2 END,
        status_message = CASE WHEN $2::text IS NULL OR t.state IN {TERMINAL_SQL}
                              THEN t.status_message ELSE $3 END,
        artifacts = CASE WHEN $4::jsonb IS NULL OR t.state IN {TERMINAL_SQL}
                         THEN t.artifacts ELSE $4 END,
        {_COMPLETED_AT}, updated_at = now(), last_seq = t.last_seq + $6,
        status_at = {status_time("$2", "$3::jsonb", given="$2::text IS NOT NULL")}"""

_OUTCOME_UPDATE_LOCKED = f"""
prev AS (
    SELECT id, state FROM a2a_tasks WHERE id = $1{{guard}} FOR NO KEY UPDATE
), released AS (
    DELETE FROM a2a_claims c USING prev WHERE c.task = prev.id AND c.token = $5
), upd AS (
    UPDATE a2a_tasks t SET {_OUTCOME_SET}
    FROM prev WHERE t.id = prev.id RETURNING {{columns}}, {PUSH_SNAPSHOT}, prev.state AS previous
)"""

_OUTCOME_UPDATE_RETURNING_OLD = f"""
released AS (
    DELETE FROM a2a_claims c WHERE c.task = $1 AND c.token = $5
), upd AS (
    UPDATE a2a_tasks t SET {_OUTCOME_SET}
    WHERE t.id = $1 RETURNING {{columns}}, {PUSH_SNAPSHOT}, old.state AS previous
)"""

_RECORD_OUTCOME = f"""
WITH {{update}}, event AS (
    {append_events(f"row_id, last_seq, $7, previous, state, $8, $9, {_PUSHED_OUTCOME}", "upd")}
)
SELECT {{select}}, {notify_sql("upd.row_id")} AS notified, {_WAKE} AS woke FROM upd
"""

# A follow-up needs only the state it reports back: the row's messages and artifacts stay put.
_STATE_COLUMNS = f"t.id AS row_id, t.state, t.last_seq, {STATUS_AT}"


# The guard of an outcome recorded late: while the caller's claim ($5) holds the task, or when
# the unlogged claims table lost it (a crash, a promoted standby: the task has no claim at all)
# and nothing was written to the task since the claim was taken ($10: its last seq then).
_CLAIM_HOLDS = """
      AND (EXISTS (SELECT 1 FROM a2a_claims h WHERE h.task = $1 AND h.token = $5)
           OR (last_seq = $10::integer
               AND NOT EXISTS (SELECT 1 FROM a2a_claims h WHERE h.task = $1)))"""


def _outcome(update: str, whole_row: bool, guard: str = "") -> str:
    columns, select = (
        (TASK_COLUMNS, "upd.*") if whole_row else (_STATE_COLUMNS, "upd.state, upd.status_at")
    )
    statement = update.format(columns=columns, guard=guard)
    return _RECORD_OUTCOME.format(update=statement, select=select)


RECORD_OUTCOME = _outcome(_OUTCOME_UPDATE_LOCKED, whole_row=True)
RECORD_OUTCOME_STATE = _outcome(_OUTCOME_UPDATE_LOCKED, whole_row=False)
RECORD_OUTCOME_18 = _outcome(_OUTCOME_UPDATE_RETURNING_OLD, whole_row=True)
RECORD_OUTCOME_STATE_18 = _outcome(_OUTCOME_UPDATE_RETURNING_OLD, whole_row=False)

# The same outcome, only while the caller's claim still holds the task: a follow-up whose
# outcome met a database outage records it later with this (or finds the claim gone).
RECORD_CLAIMED_OUTCOME = _outcome(_OUTCOME_UPDATE_LOCKED, whole_row=False, guard=_CLAIM_HOLDS)

# The same outcome without its event: used when the event write itself failed.
RECORD_OUTCOME_ONLY = (
    f"WITH {_OUTCOME_UPDATE_LOCKED.format(columns=TASK_COLUMNS, guard='')}\nSELECT * FROM upd"
)


def outcome_statement(conn: Conn, *, whole_row: bool) -> str:
    """The outcome statement for the server ``conn`` talks to."""
    if conn.get_server_version() >= (18,):
        return RECORD_OUTCOME_18 if whole_row else RECORD_OUTCOME_STATE_18
    return RECORD_OUTCOME if whole_row else RECORD_OUTCOME_STATE


async def record_outcome(
    conn: Conn, row_id: uuid.UUID, *, state: str | None,
    status_message: dict[str, Any] | None = None, artifacts: list[Any] | None = None,
    event: str, actor: str, data: dict[str, Any], claim: uuid.UUID | None = None,
    with_event: bool = True, whole_row: bool = True,
) -> Record:  # fmt: skip
    """Apply an outcome and append its event in one statement; return the task row (without
    ``whole_row``: its state only)."""
    _checked(event, state)
    update = (row_id, state, status_message, artifacts, claim)
    if with_event:
        statement = outcome_statement(conn, whole_row=whole_row)
        row = await conn.fetchrow(statement, *update, 1, event, actor, data)
    else:
        row = await conn.fetchrow(RECORD_OUTCOME_ONLY, *update, 0)
    if row is None:
        raise NotFound("the task no longer exists")
    return row


async def record_claimed_outcome(
    conn: Conn, row_id: uuid.UUID, claim: uuid.UUID, *, state: str | None,
    status_message: dict[str, Any] | None = None, artifacts: list[Any] | None = None,
    event: str, actor: str, data: dict[str, Any], seen_seq: int | None = None,
) -> str | None:  # fmt: skip
    """Apply an outcome with its event if ``claim`` still holds the task, or if the claim was
    lost with the claims table and the task's last seq is still ``seen_seq`` (its seq when
    claimed); return the state stored, or None when nothing was written."""
    _checked(event, state)
    args = (row_id, state, status_message, artifacts, claim, 1, event, actor, data, seen_seq)
    row = await conn.fetchrow(RECORD_CLAIMED_OUTCOME, *args)
    return None if row is None else str(row["state"])


# Write the new state, status message and artifacts, append the event with the next seq,
# and wake listeners, in one statement (inside the transaction that locked the row).
APPLY_UPDATE = f"""
WITH upd AS (
    UPDATE a2a_tasks t SET status_at = {status_time("$2", "$3::jsonb")},
        state = $2, status_message = $3, artifacts = $4,
        {_COMPLETED_AT}, updated_at = now(), last_seq = t.last_seq + 1
    WHERE t.id = $1 RETURNING {TASK_COLUMNS}, {PUSH_SNAPSHOT}
), event AS (
    {append_events(f"row_id, last_seq, $5, $6, state, $7, $8, {_PUSHED_UPDATE}", "upd")}
)
SELECT upd.*, {notify_sql("upd.row_id")} AS notified, {_WAKE} AS woke FROM upd
"""


async def apply_update(
    conn: Conn, row_id: uuid.UUID, state: str, status_message: Any, artifacts: list[Any], *,
    event: str, previous: str, actor: str, data: dict[str, Any],
) -> Record:  # fmt: skip
    """Store a locked task's new status and artifacts with their event; return the row."""
    _checked(event, previous, state)
    args = (state, status_message, artifacts, event, previous, actor, data)
    row = await conn.fetchrow(APPLY_UPDATE, row_id, *args)
    assert row is not None
    return row
