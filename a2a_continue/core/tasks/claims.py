"""Follow-up claims: the statements that take, renew, release and sweep a task's claim.

A claim gives one follow-up at a time a task, across every process; its rules stay with
core/turns/continuation and core/turns/relay. A claim's statements update the task row and
append its events too, so they live with the row's other writers, in core/tasks (the one
package that writes `a2a_claims` and `a2a_tasks`).
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.core.access.callers import TASK_VISIBLE, Caller
from a2a_continue.core.idempotency.keys import key_cte
from a2a_continue.core.tasks.store import SYSTEM_ACTOR, TERMINAL_SQL, append_events
from a2a_continue.runtime.db import Conn, Record

# ---- follow-up claims ---------------------------------------------------------------------

# A claim is a row of `a2a_claims` (task, token, expiry): taking, renewing and releasing one
# writes no row of `a2a_tasks`. Claims a process of the previous release wrote on the task row
# (`claim_token`, `claim_expires_at`) are still honoured while they live, and the sweep logs
# and clears them once expired (see sql/0007_claims.sql).

# The event of an expired claim, given its expiry as `expired_at`.
_EXPIRED_EVENT = """id, last_seq, 'task_continue_failed', state, state, {actor}, jsonb_build_object(
    'reason', 'claim-expired',
    'detail', 'the follow-up holding this task ended without recording an outcome',
    'claimExpiredAt', expired_at), NULL"""

# Find the visible task and, in the same statement, claim it for one follow-up: the claim
# is taken only when the task is not terminal, its context matches, no live watch lease holds
# it (the agent is still working on the last message) and no live claim does. A holder that
# dies leaves a claim that expires after the agent's timeout plus a margin; the claimer that
# replaces it (its upsert updates the row: `xmax` is set) logs it as a failed follow-up
# (`claim-expired`) first, so that one the sweep removed meanwhile is not logged twice. The
# task row is locked (no key update) so that a watch lease and a claim are never taken at once;
# the claims table's key makes two claims of one task impossible. The claim's commit waits for
# its WAL flush (and, with synchronous replication, for a standby), whatever the session's
# default: a claim is the promise that one follow-up at a time reaches the agent, so a crash
# or a failover must not forget one while its follow-up is in flight (sql/0014_logged_claims).
_TARGET = f"""target AS (
    SELECT t.id AS row_id, t.task_id, t.state, t.last_seq, t.context_id, t.team_id,
           a.id AS agent_id,
           a.endpoint_url, a.protocol_version, a.auth_sealed, a.timeout_seconds, a.capabilities,
           c.expires_at AS claim_until, t.claim_expires_at AS row_claim_until,
           t.state NOT IN {TERMINAL_SQL} AND ($7::text IS NULL OR t.context_id = $7)
           AND (t.claim_expires_at IS NULL OR t.claim_expires_at < now())
           AND (t.watch_expires_at IS NULL OR t.watch_expires_at < now()) AS free
    FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id LEFT JOIN a2a_claims c ON c.task = t.id
    WHERE t.agent_id = $4 AND t.task_id = $5 AND {TASK_VISIBLE} FOR NO KEY UPDATE OF t
)"""

_CLAIM = f"""
WITH {{key}}{_TARGET}, claimed AS (
    INSERT INTO a2a_claims AS c (task, token, expires_at)
    SELECT row_id, $6, now() + make_interval(secs => COALESCE(timeout_seconds, $8) + $9)
    FROM target WHERE free{{key_mine}}
    ON CONFLICT (task) DO UPDATE SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
    WHERE c.expires_at < now()
    RETURNING c.task, c.xmax <> 0 AS replaced
), expired AS (
    UPDATE a2a_tasks t SET last_seq = t.last_seq + 1,
        claim_token = NULL, claim_expires_at = NULL
    FROM claimed JOIN target ON target.row_id = claimed.task
    WHERE t.id = claimed.task AND (claimed.replaced OR target.row_claim_until IS NOT NULL)
    RETURNING t.id, t.last_seq, t.state,
        COALESCE(CASE WHEN claimed.replaced THEN target.claim_until END,
                 target.row_claim_until, now()) AS expired_at
), logged AS (
    {append_events(_EXPIRED_EVENT.format(actor="$10"), "expired")}
)
SELECT target.*, claimed.task IS NOT NULL AS claimed, target.state AS now, expired.expired_at
       {{key_columns}}
FROM (SELECT set_config('synchronous_commit', 'on', true)) AS one
LEFT JOIN target ON true
LEFT JOIN claimed ON claimed.task = target.row_id
LEFT JOIN expired ON expired.id = target.row_id
{{key_join}}
WHERE target.row_id IS NOT NULL {{key_found}}
"""

_UNKEYED = dict.fromkeys(("key", "key_mine", "key_columns", "key_join", "key_found"), "")
CLAIM_TASK = _CLAIM.format(**_UNKEYED)

# The claim of a task no claim holds, which is nearly every follow-up: the same target, and a
# claim taken only when no claim row (live or expired) and no row claim is in the way. Where
# an expired one is (`takeover`), CLAIM_TASK then replaces it and logs it in one statement;
# a live one answers busy as there. Half the plan of CLAIM_TASK: no update of the task row
# (with its indexes) and no event to plan for the rare takeover.
FREE_CLAIM = f"""
WITH {_TARGET}, claimed AS (
    INSERT INTO a2a_claims (task, token, expires_at)
    SELECT row_id, $6, now() + make_interval(secs => COALESCE(timeout_seconds, $8) + $9)
    FROM target WHERE free AND claim_until IS NULL AND row_claim_until IS NULL
    ON CONFLICT (task) DO NOTHING
    RETURNING task
)
SELECT target.*, claimed.task IS NOT NULL AS claimed, target.state AS now,
       NULL::timestamptz AS expired_at,
       target.free AND (target.claim_until < now() OR target.row_claim_until IS NOT NULL)
           AS takeover
FROM (SELECT set_config('synchronous_commit', 'on', true)) AS one
LEFT JOIN target ON true
LEFT JOIN claimed ON claimed.task = target.row_id
WHERE target.row_id IS NOT NULL
"""

# With an Idempotency-Key ($11) the statement takes the key first and claims the task only
# when the key is its own: a retry finds the key, not a busy task. A key is a promise to
# the caller, so this commit waits for its flush.
CLAIM_TASK_KEYED = _CLAIM.format(
    key=key_cte(caller="$1", agent="$4", request="$11") + ", ",
    key_mine="\n      AND EXISTS (SELECT 1 FROM idem WHERE idem.key_mine)",
    key_columns=", idem.*",
    key_join="LEFT JOIN idem ON true",
    key_found="OR idem.key_mine IS NOT NULL",
)

# Extend a claim still held (a streamed start or follow-up holds it for the whole stream).
RENEW_CLAIM = """UPDATE a2a_claims SET expires_at = now() + make_interval(secs => $3)
WHERE task = $1 AND token = $2"""

RELEASE_CLAIM = "DELETE FROM a2a_claims WHERE task = $1 AND token = $2"

# Release every claim that has expired (a batch at a time) and log each as a failed
# follow-up, with the event's seq taken from the same row update. The task row is locked
# before the claim, in the order a claimer takes them; a claim renewed meanwhile stays.
SWEEP_EXPIRED_CLAIMS = f"""
WITH due AS (
    -- The expired claims first (their expiry index), then their tasks by key: a join would let
    -- the planner scan every task when it knows little of the small claims table.
    SELECT t.id AS task FROM a2a_tasks t
    WHERE t.id = ANY (ARRAY(
        SELECT c.task FROM a2a_claims c WHERE c.expires_at < now() ORDER BY c.expires_at LIMIT $2
    ))
    FOR NO KEY UPDATE OF t SKIP LOCKED
), gone AS (
    DELETE FROM a2a_claims c USING due WHERE c.task = due.task AND c.expires_at < now()
    RETURNING c.task, c.expires_at
), released AS (
    UPDATE a2a_tasks t SET last_seq = t.last_seq + 1
    FROM gone WHERE t.id = gone.task
    RETURNING t.id, t.last_seq, t.state, gone.expires_at AS expired_at
)
{append_events(_EXPIRED_EVENT.format(actor="$1"), "released")}
"""

# The same for the expired claims a process of the previous release left on task rows.
SWEEP_EXPIRED_ROW_CLAIMS = f"""
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
    if key is not None:
        return await conn.fetchrow(CLAIM_TASK_KEYED, *args, SYSTEM_ACTOR, key)
    row: Record | None = await conn.fetchrow(FREE_CLAIM, *args)
    if row is not None and row["takeover"]:
        row = await conn.fetchrow(CLAIM_TASK, *args, SYSTEM_ACTOR)
    return row


async def renew_claim(conn: Conn, row_id: uuid.UUID, claim: uuid.UUID, ttl_s: float) -> None:
    """Push a claim still held ``ttl_s`` from now."""
    await conn.execute(RENEW_CLAIM, row_id, claim, ttl_s)


async def release_claim(conn: Conn, row_id: uuid.UUID, claim: uuid.UUID) -> None:
    """Give up a claim without recording anything."""
    await conn.execute(RELEASE_CLAIM, row_id, claim)


async def sweep_expired_claims(conn: Conn, batch: int = 500) -> int:
    """Release expired claims and log each one; return how many were found."""
    found = 0
    for statement in (SWEEP_EXPIRED_CLAIMS, SWEEP_EXPIRED_ROW_CLAIMS):
        status = await conn.execute(statement, SYSTEM_ACTOR, batch)
        found += int(status.rsplit(" ", 1)[-1])
    return found
