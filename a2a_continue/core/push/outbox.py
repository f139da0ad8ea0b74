"""The push outbox is the event log (SPEC §12, §22): the statements of the dispatchers.

An event a push config is owed carries the task as its statement left it (`pushed`, written by
the event's own writer). Each config keeps its position in its task's log: every delivery
before (`pos_seq`, `pos_part`) is settled. A dispatcher leases a config whose task's log grew
past its position, reads its next delivery from the log, sends it, and advances the position
(with the delivery's history row) in a batched statement of its own. A delivery whose first
attempt failed, and a redelivery, is a pending row of `a2a_push_deliveries` holding its body: a
config's pending rows are sent (leased row by row) before its next event. So nothing is due
without its change, no change is recorded without its deliveries becoming due, and the
request's own statements write nothing for push beyond the event.

A delivery made from the log has the id ``delivery_id(config, seq, part)``: the same on every
attempt, by any process. Rows of the previous outbox keep their own ids.
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.core.push.owed import DELIVERY_ID_SQL, OWED, delivery_id, next_sql
from a2a_continue.core.push.takes import (
    LOG_TAKEN,
    NO_FLUSH,
    ROWS_TAKEN,
    SENT_COLUMNS,
    TAKE,
)
from a2a_continue.core.tasks.store import TERMINAL_SQL
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.hub import PUSH_CHANNEL

# The channel the dispatchers listen on (through the LISTEN hub), and the id of a delivery.
__all__ = ["PUSH_CHANNEL", "delivery_id"]


# Where a settled delivery leaves its config: past its event once the whole task was sent (or
# nothing of its event follows), else past its part.
_PAST = """pos_seq = CASE WHEN s.kind = 'task' OR NOT s.more THEN s.seq + 1 ELSE s.seq END,
        pos_part = CASE WHEN s.kind = 'task' OR NOT s.more THEN -1 ELSE s.part END,
        started = true, attempts = 0, lease_token = NULL, lease_expires_at = NULL"""

# Deliveries the receivers took (2xx), settled under lease $1: rows ($2 ids, $3 statuses), and
# deliveries from the log ($4-$12), whose configs move past them (`moving`).
_SETTLE = f"""rows_done AS (
    UPDATE a2a_push_deliveries d SET state = 'delivered', delivered_at = now(),
        last_status = s.status, last_error = NULL, lease_token = NULL, lease_expires_at = NULL
    FROM unnest($2::uuid[], $3::integer[]) AS s (id, status), {NO_FLUSH}
    WHERE cardinality($2::uuid[]) > 0 AND d.id = s.id AND d.lease_token = $1
), s AS (
    SELECT * FROM unnest($4::uuid[], $5::uuid[], $6::integer[], $7::integer[], $8::text[],
        $9::boolean[], $10::integer[], $11::integer[], $12::timestamptz[])
        AS s (id, config, seq, part, kind, more, attempts, status, at)
), moving AS (
    -- Each settled config as it is once past its delivery (still this dispatcher's).
    SELECT c.row_id, c.task, c.version, c.opening, c.opening_seq, c.created_at,
        true AS started, s.id, s.seq, s.part, s.kind, s.attempts, s.status, s.at,
        CASE WHEN s.kind = 'task' OR NOT s.more THEN s.seq + 1 ELSE s.seq END AS pos_seq,
        CASE WHEN s.kind = 'task' OR NOT s.more THEN -1 ELSE s.part END AS pos_part
    FROM s JOIN a2a_push_configs c ON c.row_id = s.config AND c.lease_token = $1
)"""

# The history rows of the deliveries from the log settled above.
_HISTORY = """INSERT INTO a2a_push_deliveries (id, config, task, seq, part, kind, state, attempts,
    last_status, delivered_at, created_at, next_attempt_at)
SELECT id, row_id, task, seq, part, kind, 'delivered', attempts, status, now(), at, now()
FROM moving
ON CONFLICT DO NOTHING"""

DELIVERED = f"""WITH {_SETTLE}, moved AS (
    UPDATE a2a_push_configs c SET pos_seq = m.pos_seq, pos_part = m.pos_part, started = true,
        attempts = 0, lease_token = NULL, lease_expires_at = NULL
    FROM moving m, {NO_FLUSH} WHERE c.row_id = m.row_id
)
{_HISTORY}"""

_ROUND_LOG_ARGS = {
    "lease_s": "$13",
    "room": "$14 - (SELECT count(*) FROM continued) - (SELECT count(*) FROM rows_taken)",
    "exclude": "\n      AND c.row_id <> ALL ($5::uuid[])",  # the configs settled here
}

# One round of a dispatcher, in one statement: settle what the receivers took ($1-$12, as
# DELIVERED); lease each settled config's next delivery at once (it is this dispatcher's
# already: no lock, no search); then, in the room left of $14, take pending rows and the configs
# whose log grew, for $13 s.
ROUND = f"""WITH RECURSIVE {_SETTLE}, going_on AS (
    SELECT m.row_id AS config, m.task, m.pos_seq, m.pos_part, n.seq, n.part, n.kind,
        n.snapshot, n.at, n.more
    FROM moving m LEFT JOIN LATERAL {next_sql("m")} n ON true
), moved AS (
    UPDATE a2a_push_configs c SET pos_seq = g.pos_seq, pos_part = g.pos_part, started = true,
        attempts = CASE WHEN g.seq IS NULL THEN 0 ELSE 1 END,
        lease_token = CASE WHEN g.seq IS NULL THEN NULL ELSE $1::uuid END,
        lease_expires_at = CASE WHEN g.seq IS NOT NULL
                                THEN now() + make_interval(secs => $13) END
    FROM going_on g, {NO_FLUSH} WHERE c.row_id = g.config
    RETURNING c.row_id, c.attempts, c.url, c.version, c.token_sealed, c.auth_scheme,
        c.credentials_sealed
), history AS (
    {_HISTORY}
), continued AS (
    SELECT 'log' AS source,
        {DELIVERY_ID_SQL.format(config="g.config", seq="g.seq", part="g.part")} AS id,
        g.config, g.seq, g.part, g.kind, g.snapshot, c.attempts, g.at AS created_at, g.more,
        {SENT_COLUMNS}
    FROM going_on g JOIN moved c ON c.row_id = g.config JOIN a2a_tasks t ON t.id = g.task
    WHERE g.seq IS NOT NULL
), {ROWS_TAKEN.format(lease_s="$13", room="$14 - (SELECT count(*) FROM continued)", exclude="")},
{LOG_TAKEN.format(**_ROUND_LOG_ARGS)}
SELECT * FROM continued UNION ALL SELECT * FROM rows_taken UNION ALL SELECT * FROM log_taken"""

# A failed attempt of a pending row: retried after $5 s, or dead after the last attempt ($6).
FAILED_ROW = """UPDATE a2a_push_deliveries SET last_status = $3, last_error = $4,
    state = CASE WHEN attempts >= $6 THEN 'dead' ELSE 'pending' END,
    next_attempt_at = now() + make_interval(secs => $5),
    lease_token = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_token = $2 RETURNING state"""

# A failed first attempt of a delivery from the log ($1 id, $2 config, lease $3; $4-$9 what it
# was; status $10, error $11, retry after $12 s, dead past $13 attempts): its config moves past
# it, and it becomes a pending row with its body (or a dead one).
FAILED_LOG = f"""
WITH s AS (
    SELECT $4::integer AS seq, $5::integer AS part, $6::text AS kind, $8::boolean AS more
), moved AS (
    UPDATE a2a_push_configs c SET {_PAST}
    FROM s WHERE c.row_id = $2 AND c.lease_token = $3 RETURNING c.task
)
INSERT INTO a2a_push_deliveries (id, config, task, seq, part, kind, snapshot, state, attempts,
    last_status, last_error, next_attempt_at, created_at)
SELECT $1, $2, moved.task, $4, $5, $6, $7::jsonb,
    CASE WHEN $9::integer >= $13::integer THEN 'dead' ELSE 'pending' END, $9, $10, $11,
    now() + make_interval(secs => $12), $14
FROM moved
ON CONFLICT DO NOTHING
RETURNING state
"""

# 410 Gone: the config is disabled, this delivery dead, and so are its config's pending rows.
GONE_ROW = """
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

# The same for a delivery from the log ($1 id, $2 config, lease $3, $4-$6 seq, part, kind, $7
# the event's time, $8 attempts, $9 error).
GONE_LOG = """
WITH disabled AS (
    UPDATE a2a_push_configs c SET enabled = false, lease_token = NULL, lease_expires_at = NULL
    WHERE c.row_id = $2 AND c.lease_token = $3 RETURNING c.task
), this AS (
    INSERT INTO a2a_push_deliveries (id, config, task, seq, part, kind, state, attempts,
        last_status, last_error, next_attempt_at, created_at)
    SELECT $1, $2, disabled.task, $4, $5, $6, 'dead', $8, 410, $9, now(), $7 FROM disabled
    ON CONFLICT DO NOTHING
)
UPDATE a2a_push_deliveries d SET state = 'dead', last_error = 'the config was disabled (410)'
FROM disabled WHERE d.config = $2 AND d.state = 'pending'
"""

# A dispatcher with nothing to send says it waits, until $1 s from now (when it looks again by
# itself): the events of pushed tasks notify while it does (core/tasks/store.push_wake_sql).
# The caller then looks once more: an event recorded before this saw no one waiting.
SLEEPING = f"""UPDATE a2a_push_wake SET sleeping = true,
    until = GREATEST(until, now() + make_interval(secs => $1)) FROM {NO_FLUSH}"""

# A dispatcher that waited and was woken says it no longer waits: the events stop notifying.
AWAKE = f"UPDATE a2a_push_wake SET sleeping = false, until = NULL FROM {NO_FLUSH} WHERE sleeping"

# How long after its task ended a config may still be owed an event: a cancel racing another
# holds no claim and may record its own after the first, for as long as an agent call may run
# (at most an hour).
PARK_AFTER = "2 hours"

# Configs whose task ended before PARK_AFTER and that were sent everything: the dispatchers
# stop looking at them (a pending row, a redelivery, is still sent).
PARK = f"""UPDATE a2a_push_configs c SET parked = true
FROM a2a_tasks t, {NO_FLUSH}
WHERE c.enabled AND NOT c.parked AND t.id = c.task AND t.state IN {TERMINAL_SQL}
  AND t.completed_at < now() - interval '{PARK_AFTER}' AND t.last_seq < c.pos_seq
  AND c.lease_token IS NULL AND NOT EXISTS (
      SELECT 1 FROM a2a_push_deliveries d WHERE d.config = c.row_id AND d.state = 'pending')"""

RELEASE_LEASES = """
WITH rows_held AS (
    UPDATE a2a_push_deliveries SET lease_token = NULL, lease_expires_at = NULL
    WHERE lease_token = $1 AND state = 'pending'
)
UPDATE a2a_push_configs SET lease_token = NULL, lease_expires_at = NULL WHERE lease_token = $1"""

# What waits, across every process: pending rows, and events past an active config's position.
COUNT_PENDING = f"""SELECT
    (SELECT count(*) FROM a2a_push_deliveries WHERE state = 'pending')
  + (SELECT count(*) FROM a2a_push_configs c
     JOIN a2a_task_events e ON e.task = c.task AND e.seq >= c.pos_seq AND {OWED}
     WHERE c.enabled AND NOT c.parked)"""


async def take(conn: Conn, lease: uuid.UUID, lease_s: float, limit: int) -> list[Record]:
    """Lease up to ``limit`` due deliveries to this dispatcher: pending rows first, then the
    next delivery of configs whose log grew."""
    rows: list[Record] = await conn.fetch(TAKE, lease, lease_s, limit)
    return rows


def _column(taken: list[tuple[Record, int]], name: str) -> list[Any]:
    return [row[name] for row, _ in taken]


def _settled(taken: list[tuple[Record, int]], lease: uuid.UUID) -> list[Any]:
    """The arguments $1-$12 of DELIVERED and ROUND."""
    rows = [(r, s) for r, s in taken if r["source"] == "row"]
    log = [(r, s) for r, s in taken if r["source"] == "log"]
    columns = ("id", "config", "seq", "part", "kind", "more", "attempts")
    return [
        lease,
        _column(rows, "id"),
        [s for _, s in rows],
        *(_column(log, name) for name in columns),
        [s for _, s in log],
        _column(log, "created_at"),
    ]


async def delivered(conn: Conn, taken: list[tuple[Record, int]], lease: uuid.UUID) -> None:
    """Record deliveries the receivers took (2xx), with the status each answered."""
    await conn.execute(DELIVERED, *_settled(taken, lease))


async def round_of(
    conn: Conn, taken: list[tuple[Record, int]], lease: uuid.UUID, lease_s: float, limit: int
) -> list[Record]:
    """Record deliveries the receivers took and lease up to ``limit`` more: the next of each
    config just settled, then pending rows, then configs whose log grew."""
    rows: list[Record] = await conn.fetch(ROUND, *_settled(taken, lease), lease_s, limit)
    return rows


async def failed(
    conn: Conn,
    row: Record,
    lease: uuid.UUID,
    *,
    status: int | None,
    error: str,
    retry_s: float,
    max_attempts: int,
) -> str | None:
    """Record a failed attempt; return the delivery's state now (``dead`` after the last), or
    None when the lease was lost (another process sends it again)."""
    error = error[:500]
    if row["source"] == "row":
        state = await conn.fetchval(
            FAILED_ROW, row["id"], lease, status, error, retry_s, max_attempts
        )
    else:
        state = await conn.fetchval(
            FAILED_LOG, row["id"], row["config"], lease, row["seq"], row["part"], row["kind"],
            row["snapshot"], row["more"], row["attempts"], status, error, retry_s,
            max_attempts, row["created_at"],
        )  # fmt: skip
    return None if state is None else str(state)


async def gone(conn: Conn, row: Record, lease: uuid.UUID, error: str) -> None:
    """Record a 410: the config is disabled, its pending deliveries dead."""
    if row["source"] == "row":
        await conn.execute(GONE_ROW, row["id"], lease, error[:500])
    else:
        await conn.execute(
            GONE_LOG, row["id"], row["config"], lease, row["seq"], row["part"], row["kind"],
            row["created_at"], row["attempts"], error[:500],
        )  # fmt: skip


async def sleeping(conn: Conn, wait_s: float) -> None:
    """Say this dispatcher waits for a notification, for ``wait_s`` at most."""
    await conn.execute(SLEEPING, wait_s)


async def awake(conn: Conn) -> None:
    """Say this dispatcher, woken, no longer waits for a notification."""
    await conn.execute(AWAKE)


async def park(conn: Conn) -> None:
    """Stop looking at the configs of tasks that ended long ago and were sent everything."""
    await conn.execute(PARK)


async def release_leases(conn: Conn, lease: uuid.UUID) -> None:
    """Give back what a stopping dispatcher holds (the next attempt may start now)."""
    await conn.execute(RELEASE_LEASES, lease)


async def count_pending(conn: Conn) -> int:
    """How many deliveries wait (events past a position count once), across every process."""
    return int(await conn.fetchval(COUNT_PENDING))
