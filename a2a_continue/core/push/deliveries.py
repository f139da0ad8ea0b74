"""Push deliveries as callers see them (SPEC §12): a config's history rows and, after them,
what its task's log still owes it (core/push/owed.py), in the order they are sent; and
redelivery under the same id."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections.abc import Mapping

import msgspec

from a2a_continue.core.access.callers import TASK_VISIBLE, Caller
from a2a_continue.core.push.configs import task_row_id
from a2a_continue.core.push.owed import DELIVERY_ID_SQL, SNAPSHOT_OF_EVENT, parts_sql
from a2a_continue.core.shapes.pagination import cursor_bytes, issued, limit_param, not_issued
from a2a_continue.core.shapes.wire import Out
from a2a_continue.errors import AppError, NotFound
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.hub import PUSH_CHANNEL


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
    SELECT c.* FROM a2a_push_configs c
    JOIN a2a_tasks t ON t.id = c.task JOIN a2a_agents a ON a.id = t.agent_id
    WHERE t.agent_id = $4 AND t.task_id = $5 AND c.id = $6 AND {TASK_VISIBLE}
)"""

DELIVERY_COLUMNS = """d.id, d.seq, d.part, d.kind, d.state, d.attempts, d.last_status,
    d.last_error, CASE WHEN d.state = 'pending' THEN d.next_attempt_at END AS next_attempt_at,
    d.delivered_at, d.created_at"""

# What an enabled config's log still owes it, as deliveries not yet attempted.
_OWED = f"""SELECT {DELIVERY_ID_SQL.format(config="c.row_id", seq="n.seq", part="n.part")} AS id,
    n.seq, n.part, n.kind, 'pending' AS state, 0 AS attempts, NULL::integer AS last_status,
    NULL::text AS last_error, n.at AS next_attempt_at, NULL::timestamptz AS delivered_at,
    n.at AS created_at
FROM config c CROSS JOIN LATERAL ({parts_sql("c")}) n WHERE c.enabled"""

LIST_DELIVERIES = f"""WITH {_CONFIG}
SELECT * FROM (
    SELECT {DELIVERY_COLUMNS} FROM a2a_push_deliveries d
    JOIN config ON d.task = config.task AND d.config = config.row_id
    UNION ALL
    {_OWED}
) d
WHERE ($7::integer IS NULL OR (d.seq, d.part) > ($7, $8))
ORDER BY d.seq, d.part LIMIT $9"""

FIND_CONFIG = f"WITH {_CONFIG} SELECT row_id, enabled FROM config"

# A row kept without its body (delivered at its first attempt) gets it back from its event,
# or from its config's opening (the task as it stood when a config given on a start was made).
_BODY = f"""COALESCE(d.snapshot,
        CASE WHEN d.seq = config.opening_seq AND d.kind = 'task' THEN config.opening END,
        (SELECT {SNAPSHOT_OF_EVENT.format(kind="d.kind", part="d.part")}
         FROM a2a_task_events e WHERE e.task = d.task AND e.seq = d.seq))"""

REDELIVER = f"""WITH {_CONFIG}
UPDATE a2a_push_deliveries d SET state = 'pending', attempts = 0, next_attempt_at = now(),
    lease_token = NULL, lease_expires_at = NULL, delivered_at = NULL, snapshot = {_BODY}
FROM config WHERE d.config = config.row_id AND d.id = $7 AND d.state <> 'pending'
RETURNING {DELIVERY_COLUMNS}, pg_notify('{PUSH_CHANNEL}', '') AS notified"""

SELECT_DELIVERY = f"""WITH {_CONFIG}
SELECT d.state FROM a2a_push_deliveries d JOIN config ON d.config = config.row_id
WHERE d.id = $7
UNION ALL
SELECT state FROM ({_OWED}) owed WHERE id = $7"""


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


def decode_snapshot(raw: object) -> dict[str, object]:
    """A delivery's snapshot as a dict (the pool may hand jsonb over as text)."""
    if isinstance(raw, str | bytes):
        value = msgspec.json.decode(raw)
        return value if isinstance(value, dict) else {}
    return raw if isinstance(raw, dict) else {}
