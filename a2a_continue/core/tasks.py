"""The task store: every statement that writes `a2a_tasks` or `a2a_task_events`.

Rules stay with the callers (continuation, leases, updates); one fragment writes every event.
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.a2a.protocol import CANONICAL_STATES, TERMINAL_STATES, AgentTask
from a2a_continue.core.callers import TASK_VISIBLE, Caller
from a2a_continue.core.idempotency_keys import key_cte
from a2a_continue.core.task_reads import LEASED_COLUMNS, TASK_COLUMNS
from a2a_continue.errors import NotFound
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.hub import notify_sql

# Who writes the events no caller asked for (an expired claim, a watch): the gateway itself.
SYSTEM_ACTOR = "a2a-continue"
TERMINAL_SQL = "(" + ", ".join(f"'{s}'" for s in CANONICAL_STATES if s in TERMINAL_STATES) + ")"


def append_events(values: str, rows: str) -> str:
    """SQL appending an event per row of ``rows`` (``values``: task, seq, type, previous and
    new state, actor, data); the seq is the `last_seq` the statement's own update of the task
    row returned (1 for a row it inserts), so that concurrent writers never share one."""
    return (
        "INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor, data)"
        f"\n    SELECT {values} FROM {rows}"
    )


# ---- events and new tasks -----------------------------------------------------------------

APPEND_EVENT = f"""
WITH next AS (
    UPDATE a2a_tasks SET last_seq = last_seq + 1 WHERE id = $1 RETURNING id, last_seq
), appended AS (
    {append_events("id, last_seq, $2, $3, $4, $5, $6", "next")} RETURNING task, seq
)
SELECT seq, {notify_sql("appended.task")} AS notified FROM appended
"""


async def append_event(
    conn: Conn, row_id: uuid.UUID, kind: str, previous_state: str | None, new_state: str | None,
    actor: str, data: dict[str, Any],
) -> int:  # fmt: skip
    """Append one event with the task's next sequence number (safe under concurrency)."""
    seq = await conn.fetchval(APPEND_EVENT, row_id, kind, previous_state, new_state, actor, data)
    if seq is None:
        raise NotFound("the task no longer exists")
    return int(seq)


# An existing row a new task's claim may take: no claim (an expired one is left to the sweep,
# which logs it) and no live watch lease.
_CLAIMABLE = """EXCLUDED.claim_token IS NOT NULL AND t.claim_token IS NULL
    AND (t.watch_token IS NULL OR t.watch_expires_at < now())"""

_KEEP_TERMINAL = ",\n        ".join(
    f"{c} = CASE WHEN t.state IN {TERMINAL_SQL} THEN t.{c} ELSE EXCLUDED.{c} END"
    for c in ("state", "status_message", "artifacts", "completed_at")
)

# Insert the task an agent reported, or refresh the caller's own row of it (another caller's
# row is left alone); a terminal state is never overwritten. A new row starts its log with
# `task_created` (seq 1), which notifies nobody: no stream can wait on a row just created.
# A streamed start takes the task's claim here ($10 for $11 s; NULL takes none), so that no
# watch lease is taken while its stream runs; an existing row only when nobody holds it.
RECORD_NEW_TASK = f"""
WITH up AS (
    INSERT INTO a2a_tasks AS t (agent_id, task_id, context_id, state, status_message,
        artifacts, owner, team_id, completed_at, last_seq, claim_token, claim_expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $4 IN {TERMINAL_SQL} THEN now() END, 1,
        $10::uuid, CASE WHEN $10::uuid IS NOT NULL THEN now() + make_interval(secs => $11) END)
    ON CONFLICT (agent_id, task_id) DO UPDATE SET
        claim_token = CASE WHEN {_CLAIMABLE} THEN EXCLUDED.claim_token ELSE t.claim_token END,
        claim_expires_at = CASE WHEN {_CLAIMABLE} THEN EXCLUDED.claim_expires_at
                                ELSE t.claim_expires_at END,
        {_KEEP_TERMINAL},
        context_id = COALESCE(t.context_id, EXCLUDED.context_id), updated_at = now()
    WHERE t.owner = EXCLUDED.owner
    RETURNING t.id, t.state, (xmax = 0) AS inserted
), created AS (
    {append_events("id, 1, 'task_created', NULL, state, $7, $9", "up WHERE inserted")}
)
SELECT id, state, inserted FROM up
"""


async def record_new_task(
    conn: Conn, agent_id: uuid.UUID, task: AgentTask, owner: str, team_id: str | None,
    data: dict[str, Any], claim: uuid.UUID | None = None, claim_s: float = 0.0,
) -> str | None:  # fmt: skip
    """Store a task the agent reported for ``owner`` (with ``claim``: claimed for ``claim_s``);
    return its stored state, or None when the task id is recorded for another caller."""
    args = (task.id, task.context_id, task.state, task.status_message, task.artifacts, owner)
    row = await conn.fetchrow(RECORD_NEW_TASK, agent_id, *args, team_id, data, claim, claim_s)
    return None if row is None else str(row["state"])


# ---- outcomes and updates -----------------------------------------------------------------

# A task that turns terminal ($2) completes now.
_COMPLETED_AT = f"""completed_at = CASE WHEN t.state NOT IN {TERMINAL_SQL} AND $2 IN {TERMINAL_SQL}
                            THEN now() ELSE t.completed_at END"""

# Apply an outcome to a task: the new state (NULL keeps it; a terminal state is kept too),
# the release of the caller's claim ($5), and one event ($7-$9) whose seq comes from the
# same row update ($6 = 1; 0 when the event is left out).
_OUTCOME_UPDATE = f"""
prev AS (
    SELECT id, state FROM a2a_tasks WHERE id = $1 FOR UPDATE
), upd AS (
    UPDATE a2a_tasks t SET
        state = CASE WHEN $2::text IS NULL OR t.state IN {TERMINAL_SQL} THEN t.state ELSE $2 END,
        status_message = CASE WHEN $2::text IS NULL OR t.state IN {TERMINAL_SQL}
                              THEN t.status_message ELSE $3 END,
        artifacts = CASE WHEN $4::jsonb IS NULL OR t.state IN {TERMINAL_SQL}
                         THEN t.artifacts ELSE $4 END,
        {_COMPLETED_AT}, updated_at = now(), last_seq = t.last_seq + $6,
        claim_token = CASE WHEN t.claim_token = $5 THEN NULL ELSE t.claim_token END,
        claim_expires_at = CASE WHEN t.claim_token = $5 THEN NULL ELSE t.claim_expires_at END
    FROM prev WHERE t.id = prev.id RETURNING {TASK_COLUMNS}, prev.state AS previous
)"""

RECORD_OUTCOME = f"""
WITH {_OUTCOME_UPDATE}, event AS (
    {append_events("row_id, last_seq, $7, previous, state, $8, $9", "upd")}
)
SELECT upd.*, {notify_sql("upd.row_id")} AS notified FROM upd
"""

# The same outcome without its event: used when the event write itself failed.
RECORD_OUTCOME_ONLY = f"WITH {_OUTCOME_UPDATE}\nSELECT * FROM upd"


async def record_outcome(
    conn: Conn, row_id: uuid.UUID, *, state: str | None,
    status_message: dict[str, Any] | None = None, artifacts: list[Any] | None = None,
    event: str, actor: str, data: dict[str, Any], claim: uuid.UUID | None = None,
    with_event: bool = True,
) -> Record:  # fmt: skip
    """Apply an outcome and append its event in one statement; return the task row."""
    update = (row_id, state, status_message, artifacts, claim)
    if with_event:
        row = await conn.fetchrow(RECORD_OUTCOME, *update, 1, event, actor, data)
    else:
        row = await conn.fetchrow(RECORD_OUTCOME_ONLY, *update, 0)
    if row is None:
        raise NotFound("the task no longer exists")
    return row


# Write the new state, status message and artifacts, append the event with the next seq,
# and wake listeners, in one statement (inside the transaction that locked the row).
APPLY_UPDATE = f"""
WITH upd AS (
    UPDATE a2a_tasks t SET state = $2, status_message = $3, artifacts = $4,
        {_COMPLETED_AT}, updated_at = now(), last_seq = t.last_seq + 1
    WHERE t.id = $1 RETURNING {TASK_COLUMNS}
), event AS (
    {append_events("row_id, last_seq, $5, $6, state, $7, $8", "upd")}
)
SELECT upd.*, {notify_sql("upd.row_id")} AS notified FROM upd
"""


async def apply_update(
    conn: Conn, row_id: uuid.UUID, state: str, status_message: Any, artifacts: list[Any], *,
    event: str, previous: str, actor: str, data: dict[str, Any],
) -> Record:  # fmt: skip
    """Store a locked task's new status and artifacts with their event; return the row."""
    args = (state, status_message, artifacts, event, previous, actor, data)
    row = await conn.fetchrow(APPLY_UPDATE, row_id, *args)
    assert row is not None
    return row


# ---- follow-up claims ---------------------------------------------------------------------

# The event of an expired claim, given the row's `claim_expires_at` as `expired_at`.
_EXPIRED_EVENT = """id, last_seq, 'task_continue_failed', state, state, {actor}, jsonb_build_object(
    'reason', 'claim-expired',
    'detail', 'the follow-up holding this task ended without recording an outcome',
    'claimExpiredAt', expired_at)"""

# Find the visible task and, in the same statement, claim it for one follow-up: the claim
# is taken only when the task is not terminal, its context matches and no live claim holds
# it. A holder that dies leaves a claim that expires after the agent's timeout plus a margin;
# the claimer that finds it expired logs it as a failed follow-up (`claim-expired`) first.
# The row is locked while it is read, so the claim seen expired is the one replaced. A task
# under a live watch lease is refused too: the agent is still working on the last message.
# The claim commits without waiting for its WAL flush: a claim lost with a crash of
# PostgreSQL frees the task early; the outcome's own (waited) commit makes it durable.
_CLAIM = f"""
WITH {{key}}target AS (
    SELECT t.id AS row_id, t.task_id, t.state, t.context_id, t.team_id, a.id AS agent_id,
           a.endpoint_url, a.protocol_version, a.auth_sealed, a.timeout_seconds, a.capabilities,
           t.claim_expires_at AS expired_at
    FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
    WHERE t.agent_id = $4 AND t.task_id = $5 AND {TASK_VISIBLE} FOR UPDATE OF t
), claimed AS (
    UPDATE a2a_tasks t SET claim_token = $6,
        claim_expires_at = now() + make_interval(secs => COALESCE(target.timeout_seconds, $8) + $9),
        last_seq = t.last_seq + (target.expired_at IS NOT NULL)::int
    FROM target WHERE t.id = target.row_id AND t.state NOT IN {TERMINAL_SQL}
      AND ($7::text IS NULL OR t.context_id = $7)
      AND (t.claim_expires_at IS NULL OR t.claim_expires_at < now())
      AND (t.watch_expires_at IS NULL OR t.watch_expires_at < now()){{key_mine}}
    RETURNING t.id, t.state, t.last_seq, target.expired_at
), expired AS (
    {append_events(_EXPIRED_EVENT.format(actor="$10"), "claimed WHERE expired_at IS NOT NULL")}
)
SELECT target.*, claimed.id IS NOT NULL AS claimed, COALESCE(claimed.state, target.state) AS now
       {{key_columns}}
FROM (SELECT set_config('synchronous_commit', '{{commit}}', true)) AS one
LEFT JOIN target ON true
LEFT JOIN claimed ON claimed.id = target.row_id
{{key_join}}
WHERE target.row_id IS NOT NULL {{key_found}}
"""

_UNKEYED = dict.fromkeys(("key", "key_mine", "key_columns", "key_join", "key_found"), "")
CLAIM_TASK = _CLAIM.format(**_UNKEYED, commit="off")

# With an Idempotency-Key ($11) the statement takes the key first and claims the task only
# when the key is its own: a retry finds the key, not a busy task. A key is a promise to
# the caller, so this commit waits for its flush.
CLAIM_TASK_KEYED = _CLAIM.format(
    key=key_cte(caller="$1", agent="$4", request="$11") + ", ",
    key_mine="\n      AND EXISTS (SELECT 1 FROM idem WHERE idem.key_mine)",
    key_columns=", idem.*",
    commit="on",
    key_join="LEFT JOIN idem ON true",
    key_found="OR idem.key_mine IS NOT NULL",
)

# Extend a claim still held (a streamed start or follow-up holds it for the whole stream).
RENEW_CLAIM = """UPDATE a2a_tasks SET claim_expires_at = now() + make_interval(secs => $3)
WHERE id = $1 AND claim_token = $2"""

RELEASE_CLAIM = """UPDATE a2a_tasks SET claim_token = NULL, claim_expires_at = NULL
WHERE id = $1 AND claim_token = $2"""

# Release every claim that has expired (a batch at a time) and log each as a failed
# follow-up, with the event's seq taken from the same row update.
SWEEP_EXPIRED_CLAIMS = f"""
WITH expired AS (
    SELECT id, claim_expires_at AS expired_at FROM a2a_tasks
    WHERE claim_expires_at < now() ORDER BY claim_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
), released AS (
    UPDATE a2a_tasks t SET claim_token = NULL, claim_expires_at = NULL, last_seq = t.last_seq + 1
    FROM expired WHERE t.id = expired.id RETURNING t.id, t.last_seq, t.state, expired.expired_at
)
{append_events(_EXPIRED_EVENT.format(actor="$1"), "released")}
"""


async def take_claim(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, task_id: str, context_id: str | None,
    claim: uuid.UUID, *, timeout_s: float, margin_s: float, key: dict[str, Any] | None = None,
) -> Record | None:  # fmt: skip
    """Find the visible task and claim it with ``claim`` (with ``key``: take the key first);
    the agent's timeout (else ``timeout_s``) plus ``margin_s`` bounds the claim."""
    args = (*caller.scope_args(), agent_id, task_id, claim, context_id, timeout_s, margin_s)
    statement, keyed = (CLAIM_TASK, ()) if key is None else (CLAIM_TASK_KEYED, (key,))
    row: Record | None = await conn.fetchrow(statement, *args, SYSTEM_ACTOR, *keyed)
    return row


async def renew_claim(conn: Conn, row_id: uuid.UUID, claim: uuid.UUID, ttl_s: float) -> None:
    """Push a claim still held ``ttl_s`` from now."""
    await conn.execute(RENEW_CLAIM, row_id, claim, ttl_s)


async def release_claim(conn: Conn, row_id: uuid.UUID, claim: uuid.UUID) -> None:
    """Give up a claim without recording anything."""
    await conn.execute(RELEASE_CLAIM, row_id, claim)


async def sweep_expired_claims(conn: Conn, batch: int = 500) -> int:
    """Release expired claims and log each one; return how many were found."""
    status = await conn.execute(SWEEP_EXPIRED_CLAIMS, SYSTEM_ACTOR, batch)
    return int(status.rsplit(" ", 1)[-1])


# ---- watch leases (their rules: core/leases.py) -------------------------------------------

# Nobody holds the task: no live lease and no live follow-up claim.
FREE_SQL = """(t.watch_token IS NULL OR t.watch_expires_at < now())
    AND (t.claim_token IS NULL OR t.claim_expires_at < now())"""

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
    {append_events("id, last_seq, 'task_watch_failed', state, state, $3, $4", "gone")}
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
