"""Follow-up claims: the statements that take, renew, release and sweep a task's claim.

A claim gives one follow-up at a time a task, across every process; its rules stay with
core/continuation and core/relay. With core/tasks and core/watches, the only writers of
`a2a_tasks`.
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.core.callers import TASK_VISIBLE, Caller
from a2a_continue.core.idempotency_keys import key_cte
from a2a_continue.core.tasks import SYSTEM_ACTOR, TERMINAL_SQL, append_events
from a2a_continue.runtime.db import Conn, Record

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
