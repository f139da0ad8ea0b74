"""The store of Idempotency-Keys: every statement on `a2a_idempotency_keys`."""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.runtime.db import Conn, Record

SWEEP_BATCH = 1000

# A row another request may take: past its TTL (whatever it holds), or left in flight for
# the same request by a holder that stopped before answering and whose lease ran out.
_TAKEABLE = """(k.expires_at <= now() OR (k.status IS NULL AND NOT k.streamed
        AND k.locked_until <= now() AND k.request_hash = EXCLUDED.request_hash))"""

_COLUMNS = (
    "route",
    "agent_id",
    "request_hash",
    "token",
    "created_at",
    "expires_at",
    "locked_until",
    "status",
    "task_state",
    "content_type",
    "body",
    "streamed",
    "stream_task",
)
_TAKE_OVER_SET = ",\n        ".join(
    f"{c} = CASE WHEN {_TAKEABLE} THEN EXCLUDED.{c} ELSE k.{c} END" for c in _COLUMNS
)

# The CTE ``idem``: take the key for this request, or return who holds it and what it keeps.
# The conflict branch always updates (mostly to the same values) so that RETURNING shows the
# latest committed row, even one inserted by a request that raced this one. ``{request}`` is
# a jsonb parameter; NULL takes nothing. The in-flight lease lasts the agent's timeout plus
# the claim margin, like a follow-up's claim.
_KEY_CTE = f"""idem AS (
    INSERT INTO a2a_idempotency_keys AS k (caller, key, route, agent_id, request_hash, token,
        expires_at, locked_until)
    SELECT {{caller}}, r->>'key', r->>'route', {{agent}}, decode(r->>'hash', 'hex'),
        (r->>'token')::uuid, now() + make_interval(secs => (r->>'ttl')::float8),
        now() + make_interval(secs => COALESCE(
            (SELECT a.timeout_seconds FROM a2a_agents a WHERE a.id = {{agent}}),
            (r->>'timeout')::float8) + (r->>'margin')::float8)
    FROM (SELECT {{request}}::jsonb AS r) AS req WHERE r IS NOT NULL
    ON CONFLICT (caller, key) DO UPDATE SET
        {_TAKE_OVER_SET}
    RETURNING k.token = ({{request}}::jsonb->>'token')::uuid AS key_mine,
        k.request_hash = decode({{request}}::jsonb->>'hash', 'hex') AS key_same,
        k.agent_id AS key_agent_id, k.status AS key_status, k.task_state AS key_task_state,
        k.content_type AS key_content_type, k.body AS key_body, k.streamed AS key_streamed,
        k.stream_task AS key_stream_task
)"""


def key_cte(*, caller: str, agent: str, request: str) -> str:
    """The key-taking CTE ``idem`` with the statement's own parameter numbers."""
    return _KEY_CTE.format(caller=caller, agent=agent, request=request)


TAKE_KEY = f"WITH {key_cte(caller='$1', agent='$2::uuid', request='$3')} SELECT * FROM idem"

STORE_ANSWER = """
UPDATE a2a_idempotency_keys
SET status = $4, task_state = $5, content_type = $6, body = $7, locked_until = NULL
WHERE caller = $1 AND key = $2 AND token = $3
"""

MARK_STREAMED = """
UPDATE a2a_idempotency_keys
SET streamed = true, stream_task = COALESCE($4, stream_task), locked_until = NULL
WHERE caller = $1 AND key = $2 AND token = $3 AND status IS NULL
"""

RELEASE_KEY = "DELETE FROM a2a_idempotency_keys WHERE caller = $1 AND key = $2 AND token = $3"

SWEEP = """
DELETE FROM a2a_idempotency_keys WHERE (caller, key) IN (
    SELECT caller, key FROM a2a_idempotency_keys WHERE expires_at <= now()
    ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
"""


async def take_key(
    conn: Conn, caller: str, agent_id: uuid.UUID, request: dict[str, Any] | None
) -> Record | None:
    """Take the key ``request`` describes (the ``idem`` CTE's parameter); return its row."""
    row: Record | None = await conn.fetchrow(TAKE_KEY, caller, agent_id, request)
    return row


async def store_answer(
    conn: Conn,
    caller: str,
    key: str,
    token: uuid.UUID,
    status: int,
    task_state: str | None,
    content_type: str | None,
    body: bytes,
) -> None:
    """Keep the answer of the key ``token`` holds."""
    await conn.execute(STORE_ANSWER, caller, key, token, status, task_state, content_type, body)


async def mark_streamed(
    conn: Conn, caller: str, key: str, token: uuid.UUID, task_id: str | None
) -> None:
    """Record that the key's answer is streamed (about ``task_id``, once known)."""
    await conn.execute(MARK_STREAMED, caller, key, token, task_id)


async def release_key(conn: Conn, caller: str, key: str, token: uuid.UUID) -> None:
    """Let the key ``token`` holds go."""
    await conn.execute(RELEASE_KEY, caller, key, token)


async def sweep(conn: Conn, batch: int = SWEEP_BATCH) -> int:
    """Remove expired keys; return how many."""
    removed = 0
    while True:
        status = await conn.execute(SWEEP, batch)
        count = int(status.split()[-1])
        removed += count
        if count < batch:
            return removed
