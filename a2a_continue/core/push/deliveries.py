"""The push outbox (SPEC §12): deliveries as callers see them, redelivery, and the statements
of the dispatchers (take due rows under a lease, settle each attempt).

Deliveries are enqueued by the statement that appends their event (the trigger of
``sql/0012_push_wake.sql``, which notifies only when a dispatcher said it waits); a delivery
waits for every earlier pending delivery of its config.
"""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections.abc import Mapping

import msgspec

from a2a_continue.core.access.callers import TASK_VISIBLE, Caller
from a2a_continue.core.push.configs import task_row_id
from a2a_continue.core.shapes.pagination import cursor_bytes, issued, limit_param, not_issued
from a2a_continue.core.shapes.wire import Out
from a2a_continue.errors import AppError, NotFound
from a2a_continue.runtime.db import Conn, Record

# The channel a new or requeued delivery notifies (through the LISTEN hub, which wakes the
# dispatcher of every process).
PUSH_CHANNEL = "a2ac_push"


class DeliveryOut(Out):
    """One delivery: its id is the ``A2A-Delivery-Id`` it is sent with."""

    id: uuid.UUID
    seq: int
    kind: str
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: dt.datetime | None
    delivered_at: dt.datetime | None
    created_at: dt.datetime


class DeliveryList(Out):
    deliveries: list[DeliveryOut]
    next_cursor: str | None


class DeliveryPending(AppError):
    status, slug, title = 409, "delivery-pending", "The delivery is still pending"


class ConfigDisabled(AppError):
    status, slug, title = 409, "push-config-disabled", "The push config is disabled"


# The visible task ($4 agent, $5 task id) and its config ($6); $1-$3 the caller's scope.
_CONFIG = f"""config AS (
    SELECT c.row_id, c.task, c.enabled FROM a2a_push_configs c
    JOIN a2a_tasks t ON t.id = c.task JOIN a2a_agents a ON a.id = t.agent_id
    WHERE t.agent_id = $4 AND t.task_id = $5 AND c.id = $6 AND {TASK_VISIBLE}
)"""

DELIVERY_COLUMNS = """d.id, d.seq, d.part, d.kind, d.state, d.attempts, d.last_status,
    d.last_error, CASE WHEN d.state = 'pending' THEN d.next_attempt_at END AS next_attempt_at,
    d.delivered_at, d.created_at"""

LIST_DELIVERIES = f"""WITH {_CONFIG}
SELECT {DELIVERY_COLUMNS} FROM a2a_push_deliveries d
JOIN config ON d.task = config.task AND d.config = config.row_id
WHERE ($7::integer IS NULL OR (d.seq, d.part) > ($7, $8))
ORDER BY d.seq, d.part LIMIT $9"""

FIND_CONFIG = f"WITH {_CONFIG} SELECT row_id, enabled FROM config"

REDELIVER = f"""WITH {_CONFIG}
UPDATE a2a_push_deliveries d SET state = 'pending', attempts = 0, next_attempt_at = now(),
    lease_token = NULL, lease_expires_at = NULL, delivered_at = NULL
FROM config WHERE d.config = config.row_id AND d.id = $7 AND d.state <> 'pending'
RETURNING {DELIVERY_COLUMNS}, pg_notify('{PUSH_CHANNEL}', '') AS notified"""

SELECT_DELIVERY = f"""WITH {_CONFIG}
SELECT d.state FROM a2a_push_deliveries d JOIN config ON d.config = config.row_id
WHERE d.id = $7"""


def delivery_out(row: Record) -> DeliveryOut:
    """Shape a delivery row for callers."""
    return DeliveryOut(
        id=row["id"],
        seq=row["seq"],
        kind=row["kind"],
        state=row["state"],
        attempts=row["attempts"],
        last_status=row["last_status"],
        last_error=row["last_error"],
        next_attempt_at=row["next_attempt_at"],
        delivered_at=row["delivered_at"],
        created_at=row["created_at"],
    )


def _cursor(row: Record) -> str:
    return _encoded(row["seq"], row["part"])


def _encoded(seq: int, part: int) -> str:
    return base64.urlsafe_b64encode(f"{seq}.{part}".encode()).decode().rstrip("=")


INT4_MAX = 2**31 - 1  # seq and part are integer columns


def _after(params: Mapping[str, str]) -> tuple[int | None, int | None]:
    text = cursor_bytes(params)
    if text is None:
        return None, None
    try:
        seq, part = (int(number) for number in text.decode("ascii").split("."))
    except ValueError:  # UnicodeDecodeError included
        raise not_issued() from None
    if not (0 <= seq <= INT4_MAX and 0 <= part <= INT4_MAX):
        raise not_issued()
    issued(params, _encoded(seq, part))
    return seq, part


async def _config(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, task_id: str, config_id: str
) -> Record:
    row = await conn.fetchrow(FIND_CONFIG, *caller.scope_args(), agent_id, task_id, config_id)
    if row is None:
        await task_row_id(conn, caller, agent_id, task_id)
        raise NotFound(f"push config {config_id} not found")
    return row


async def list_deliveries(
    conn: Conn,
    caller: Caller,
    agent_id: uuid.UUID,
    task_id: str,
    config_id: str,
    params: Mapping[str, str],
) -> DeliveryList:
    """A config's deliveries in the order they are sent (keyset pages)."""
    limit = limit_param(params)
    seq, part = _after(params)
    await _config(conn, caller, agent_id, task_id, config_id)
    scope = (*caller.scope_args(), agent_id, task_id, config_id)
    rows = await conn.fetch(LIST_DELIVERIES, *scope, seq, part, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return DeliveryList(
        deliveries=[delivery_out(r) for r in rows],
        next_cursor=_cursor(rows[-1]) if more else None,
    )


async def redeliver(
    conn: Conn,
    caller: Caller,
    agent_id: uuid.UUID,
    task_id: str,
    config_id: str,
    delivery_id: uuid.UUID,
) -> DeliveryOut:
    """Queue a dead or delivered delivery again, under the same id (409 while pending, or
    when a 410 disabled its config)."""
    config = await _config(conn, caller, agent_id, task_id, config_id)
    if not config["enabled"]:
        raise ConfigDisabled("the receiver answered 410 Gone; create the config again")
    scope = (*caller.scope_args(), agent_id, task_id, config_id, delivery_id)
    row = await conn.fetchrow(REDELIVER, *scope)
    if row is not None:
        return delivery_out(row)
    if await conn.fetchval(SELECT_DELIVERY, *scope) == "pending":
        raise DeliveryPending("the delivery is still pending; it will be sent")
    raise NotFound(f"delivery {delivery_id} not found")


# ---- the dispatchers' statements -----------------------------------------------------------

# The dispatchers' statements commit without waiting for the WAL flush: a take or a settle
# lost in a crash only means the delivery is sent again (at-least-once; the receiver dedupes
# on its id), and they stay off the flush queue the requests' commits wait in.
_NO_FLUSH = "(SELECT set_config('synchronous_commit', 'off', true)) AS no_flush"

# Take up to $3 due deliveries under a lease ($1 for $2 s): pending, due, not leased (or the
# lease ran out: its sender died), and first in its config's queue (order per config).
# SKIP LOCKED: two dispatchers never take the same row. The heads of the queues are found by
# walking the queue index one config at a time (each step one descent to the next config's
# first pending row), so a take reads one row per config with pending deliveries, however
# many wait behind each: a receiver retried or dead, or a dispatcher behind, with thousands
# queued costs a take no more than one with a few.
TAKE_DUE = f"""
WITH RECURSIVE head AS (
    (SELECT d.id, d.config, d.next_attempt_at, d.lease_expires_at
     FROM a2a_push_deliveries d
     WHERE d.state = 'pending' ORDER BY d.config, d.seq, d.part LIMIT 1)
    UNION ALL
    SELECT n.* FROM head h CROSS JOIN LATERAL (
        SELECT d.id, d.config, d.next_attempt_at, d.lease_expires_at
        FROM a2a_push_deliveries d
        WHERE d.state = 'pending' AND d.config > h.config
        ORDER BY d.config, d.seq, d.part LIMIT 1
    ) n
), pick AS (
    SELECT h.id FROM head h
    WHERE h.next_attempt_at <= now()
      AND (h.lease_expires_at IS NULL OR h.lease_expires_at < now())
    ORDER BY h.next_attempt_at LIMIT $3
), due AS (
    -- Each picked row by its key, checked again as locked: another dispatcher may have
    -- leased it since.
    SELECT x.id FROM pick CROSS JOIN LATERAL (
        SELECT d.id FROM a2a_push_deliveries d
        WHERE d.id = pick.id AND d.state = 'pending' AND d.next_attempt_at <= now()
          AND (d.lease_expires_at IS NULL OR d.lease_expires_at < now())
        FOR UPDATE SKIP LOCKED
    ) x
)
UPDATE a2a_push_deliveries d SET lease_token = $1, attempts = d.attempts + 1,
    lease_expires_at = now() + make_interval(secs => $2)
FROM a2a_push_configs c, a2a_tasks t, {_NO_FLUSH}
WHERE d.id = ANY (ARRAY(SELECT due.id FROM due)) AND c.row_id = d.config AND t.id = d.task
RETURNING d.id, d.seq, d.kind, d.snapshot, d.attempts, d.config, c.url, c.version,
    c.token_sealed, c.auth_scheme, c.credentials_sealed, t.task_id, t.context_id,
    d.created_at
"""

# Deliveries the receivers took (2xx), settled together: ids $1, statuses $2, lease $3.
DELIVERED = f"""UPDATE a2a_push_deliveries d SET state = 'delivered', delivered_at = now(),
    last_status = s.status, last_error = NULL, lease_token = NULL, lease_expires_at = NULL
FROM unnest($1::uuid[], $2::integer[]) AS s (id, status), {_NO_FLUSH}
WHERE d.id = s.id AND d.lease_token = $3"""

# A failed attempt: retried after $5 s, or dead after the last attempt ($6).
FAILED = """UPDATE a2a_push_deliveries SET last_status = $3, last_error = $4,
    state = CASE WHEN attempts >= $6 THEN 'dead' ELSE 'pending' END,
    next_attempt_at = now() + make_interval(secs => $5),
    lease_token = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_token = $2 RETURNING state"""

# 410 Gone: the config is disabled; this delivery and its config's pending ones are dead.
GONE = """
WITH this AS (
    UPDATE a2a_push_deliveries SET state = 'dead', last_status = 410, last_error = $3,
        lease_token = NULL, lease_expires_at = NULL
    WHERE id = $1 AND lease_token = $2 RETURNING config
), disabled AS (
    UPDATE a2a_push_configs c SET enabled = false FROM this WHERE c.row_id = this.config
)
UPDATE a2a_push_deliveries d SET state = 'dead', last_error = 'the config was disabled (410)'
FROM this WHERE d.config = this.config AND d.state = 'pending' AND d.id <> $1
"""

# A dispatcher with nothing to send says it waits (sql/0012_push_wake.sql): the next enqueue
# notifies. True when this statement set the flag, so the caller looks once more: an enqueue
# that ran before it saw no one waiting.
SLEEPING = f"""UPDATE a2a_push_wake SET sleeping = true FROM {_NO_FLUSH}
WHERE NOT sleeping RETURNING true"""

RELEASE_LEASES = """UPDATE a2a_push_deliveries SET lease_token = NULL, lease_expires_at = NULL
WHERE lease_token = $1 AND state = 'pending'"""

COUNT_PENDING = "SELECT count(*) FROM a2a_push_deliveries WHERE state = 'pending'"


async def take_due(conn: Conn, lease: uuid.UUID, lease_s: float, limit: int) -> list[Record]:
    """Lease up to ``limit`` due deliveries to this dispatcher."""
    rows: list[Record] = await conn.fetch(TAKE_DUE, lease, lease_s, limit)
    return rows


async def delivered(conn: Conn, taken: list[tuple[uuid.UUID, int]], lease: uuid.UUID) -> None:
    """Record deliveries the receivers took (2xx), with the status each answered."""
    await conn.execute(DELIVERED, [t[0] for t in taken], [t[1] for t in taken], lease)


async def failed(
    conn: Conn,
    row_id: uuid.UUID,
    lease: uuid.UUID,
    *,
    status: int | None,
    error: str,
    retry_s: float,
    max_attempts: int,
) -> str | None:
    """Record a failed attempt; return the delivery's state now (``dead`` after the last)."""
    state = await conn.fetchval(FAILED, row_id, lease, status, error[:500], retry_s, max_attempts)
    return None if state is None else str(state)


async def gone(conn: Conn, row_id: uuid.UUID, lease: uuid.UUID, error: str) -> None:
    """Record a 410: the config is disabled, its pending deliveries dead."""
    await conn.execute(GONE, row_id, lease, error[:500])


async def sleeping(conn: Conn) -> bool:
    """Say this dispatcher waits for a notification; True when nobody had said so yet."""
    return bool(await conn.fetchval(SLEEPING))


async def release_leases(conn: Conn, lease: uuid.UUID) -> None:
    """Give back the rows a stopping dispatcher holds (their next attempt may start now)."""
    await conn.execute(RELEASE_LEASES, lease)


async def count_pending(conn: Conn) -> int:
    """How many deliveries wait, across every process."""
    return int(await conn.fetchval(COUNT_PENDING))


def decode_snapshot(raw: object) -> dict[str, object]:
    """A delivery's snapshot as a dict (the pool may hand jsonb over as text)."""
    if isinstance(raw, str | bytes):
        value = msgspec.json.decode(raw)
        return value if isinstance(value, dict) else {}
    return raw if isinstance(raw, dict) else {}
