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

import hashlib
import uuid
from typing import Any

from a2a_continue.core.tasks.store import TERMINAL_SQL, owes_push
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.hub import PUSH_CHANNEL

__all__ = ["PUSH_CHANNEL"]  # the channel the dispatchers listen on (through the LISTEN hub)

# An event `e` that push configs are owed.
_OWED = owes_push("e.type", "e.data")

# What event `e`'s deliveries are built from: what it carries, or, for an event the previous
# release appended without it (a rolling upgrade), the task as it stands.
_PUSHED = """COALESCE(e.pushed, (SELECT jsonb_build_object('state', t.state,
        'statusMessage', t.status_message, 'artifacts', t.artifacts)
    FROM a2a_tasks t WHERE t.id = e.task))"""

# The dispatchers' statements commit without waiting for the WAL flush: a take or a settle
# lost in a crash only means the delivery is sent again (at-least-once; the receiver dedupes
# on its id), and they stay off the flush queue the requests' commits wait in.
NO_FLUSH = "(SELECT set_config('synchronous_commit', 'off', true)) AS no_flush"

# The id of the delivery of part `part` of event `seq` to config `config` (SQL of the three).
DELIVERY_ID_SQL = "md5({config}::text || '/' || {seq} || '/' || {part})::uuid"


def delivery_id(config: uuid.UUID, seq: int, part: int) -> uuid.UUID:
    """The ``A2A-Delivery-Id`` of one delivery made from the log (as ``DELIVERY_ID_SQL``)."""
    return uuid.UUID(hashlib.md5(f"{config}/{seq}/{part}".encode()).hexdigest())


def _events(c: str) -> str:
    """The condition on events ``e`` that may owe config ``c`` a delivery: its task's, from its
    position on, that carry a snapshot (after an opening's seq)."""
    return f"""e.task = {c}.task AND e.seq >= {c}.pos_seq AND {_OWED}
      AND ({c}.opening_seq IS NULL OR e.seq > {c}.opening_seq)"""


def window_sql(c: str, size: int | None = None) -> str:
    """The events that may owe config ``c`` a delivery (the first ``size``), as ``e``, with
    what they are sent as in `pushed`."""
    limit = f" LIMIT {size}" if size else ""
    return f"""(SELECT e.task, e.seq, e.type, e.previous_state, e.new_state, e.data,
        e.created_at, {_PUSHED} AS pushed
        FROM a2a_task_events e WHERE {_events(c)} ORDER BY e.seq{limit}) e"""


def parts_sql(c: str, window: int | None = None) -> str:
    """The deliveries config ``c`` (a row of `a2a_push_configs`) still owes, from its position
    (within its next ``window`` events, when given): ``seq``, ``part``, ``kind``, ``snapshot``
    (what the body is built from) and ``at`` (the event's time). First the task as it stood
    when a config given on a start was made; then, per event that carries `pushed`, for 0.3
    the whole task, for 1.0 the task first and after it a status update (a state or status
    change) and one artifact update per changed artifact (part = the artifact's place, from
    1). Unordered: add ``ORDER BY seq, part``."""
    first = f"""(SELECT CASE WHEN NOT {c}.started THEN (
        SELECT min(e.seq) FROM a2a_task_events e WHERE {_events(c)}) END AS seq)"""
    not_first = "e.seq IS DISTINCT FROM fs.seq"
    artifacts = """CASE WHEN jsonb_typeof(e.pushed -> 'artifacts') = 'array'
                   THEN e.pushed -> 'artifacts' ELSE '[]' END"""
    events = window_sql(c, window)
    return f"""
    SELECT {c}.opening_seq AS seq, 0 AS part, 'task'::text AS kind, {c}.opening AS snapshot,
        {c}.created_at AS at
    WHERE {c}.opening IS NOT NULL AND {c}.pos_seq <= {c}.opening_seq
    UNION ALL
    SELECT e.seq, p.part, p.kind, p.snapshot, e.created_at
    FROM {first} fs, {events} CROSS JOIN LATERAL (
        SELECT 0 AS part, 'task'::text AS kind, e.pushed AS snapshot
        WHERE {c}.version = '0.3' OR e.seq = fs.seq
        UNION ALL
        SELECT 0, 'status', jsonb_build_object('state', e.pushed -> 'state',
            'statusMessage', e.pushed -> 'statusMessage')
        WHERE {c}.version = '1.0' AND {not_first}
          AND (e.type <> 'task_updated' OR e.previous_state IS DISTINCT FROM e.new_state
               OR NOT e.data ? 'artifactIds')
        UNION ALL
        SELECT a.n::integer, 'artifact',
            jsonb_build_object('state', e.pushed -> 'state', 'artifact', a.artifact)
        FROM jsonb_array_elements({artifacts}) WITH ORDINALITY AS a (artifact, n)
        WHERE {c}.version = '1.0' AND {not_first}
          AND CASE WHEN e.type = 'task_updated'
                   THEN COALESCE(e.data -> 'artifactIds', '[]') ? (a.artifact ->> 'artifactId')
                   ELSE e.type = 'task_continued' END
    ) p
    WHERE (e.seq, p.part) > ({c}.pos_seq, {c}.pos_part)"""


# What a delivery of kind `kind`, part `part`, is built from, given its event `e` (a redelivery
# of a row kept without its body).
SNAPSHOT_OF_EVENT = """CASE {kind}
    WHEN 'task' THEN e.pushed
    WHEN 'status' THEN jsonb_build_object('state', e.pushed -> 'state',
        'statusMessage', e.pushed -> 'statusMessage')
    ELSE jsonb_build_object('state', e.pushed -> 'state',
        'artifact', e.pushed -> 'artifacts' -> ({part} - 1)) END"""

_SENT_COLUMNS = """c.url, c.version, c.token_sealed, c.auth_scheme, c.credentials_sealed,
    t.task_id, t.context_id"""

# Pending rows (a failed attempt's retry, a redelivery, the previous outbox's queue): take up to
# $3 due ones under a lease ($1 for $2 s), first in their config's queue (order per config).
# SKIP LOCKED: two dispatchers never take the same row. The heads of the queues are found by
# walking the queue index one config at a time, so a take reads one row per config with pending
# rows, however many wait behind each.
_TAKE_ROWS = f"""head AS (
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
), rows_taken AS (
    UPDATE a2a_push_deliveries d SET lease_token = $1, attempts = d.attempts + 1,
        lease_expires_at = now() + make_interval(secs => $2)
    FROM a2a_push_configs c, a2a_tasks t, {NO_FLUSH}
    WHERE d.id = ANY (ARRAY(SELECT due.id FROM due)) AND c.row_id = d.config AND t.id = d.task
    RETURNING 'row' AS source, d.id, d.config, d.seq, d.part, d.kind, d.snapshot, d.attempts,
        d.created_at, false AS more, {_SENT_COLUMNS}
)"""

# How many events a take reads past a config's position (one owing nothing is rare: an
# event whose parts were all sent before a crash, an update naming no stored artifact).
WINDOW = 4

# Configs whose log grew past their position: lease up to {room} of them ($1 for $2 s) and read
# the next delivery of each from the next WINDOW events of its log. A config with a pending row
# waits for it (order). A config those events owe nothing moves past them (past its task's
# last event when they were all there is).
_TAKE_LOG = f"""cand AS (
    SELECT c.row_id FROM a2a_push_configs c JOIN a2a_tasks t ON t.id = c.task
    WHERE c.enabled AND NOT c.parked AND t.last_seq >= c.pos_seq
      AND (c.lease_expires_at IS NULL OR c.lease_expires_at < now())
      AND NOT EXISTS (
          SELECT 1 FROM a2a_push_deliveries d WHERE d.config = c.row_id AND d.state = 'pending')
    LIMIT {{room}}
    FOR UPDATE OF c SKIP LOCKED
), next AS (
    SELECT c.row_id AS config, c.task, n.seq, n.part, n.kind, n.snapshot, n.at, n.more, w.last
    FROM cand JOIN a2a_push_configs c ON c.row_id = cand.row_id
    LEFT JOIN LATERAL (
        -- The next delivery, and whether another part of its event follows it.
        SELECT q.*, COALESCE(lead(q.seq) OVER (ORDER BY q.seq, q.part) = q.seq, false) AS more
        FROM ({parts_sql("c", WINDOW)} ORDER BY seq, part LIMIT 2) q
        ORDER BY q.seq, q.part LIMIT 1
    ) n ON true
    -- The last of the window's events when it is full (NULL: the window is all there is).
    CROSS JOIN LATERAL (
        SELECT CASE WHEN count(*) = {WINDOW} THEN max(e.seq) END AS last
        FROM {window_sql("c", WINDOW)}
    ) w
), leased AS (
    UPDATE a2a_push_configs c SET lease_token = $1, attempts = c.attempts + 1,
        lease_expires_at = now() + make_interval(secs => $2)
    FROM next, {NO_FLUSH}
    WHERE c.row_id = next.config AND next.seq IS NOT NULL
    RETURNING c.row_id, c.attempts, c.url, c.version, c.token_sealed, c.auth_scheme,
        c.credentials_sealed
), caught_up AS (
    UPDATE a2a_push_configs c SET pos_seq = COALESCE(next.last, t.last_seq) + 1, pos_part = -1
    FROM next, a2a_tasks t
    WHERE c.row_id = next.config AND next.seq IS NULL AND t.id = next.task
), log_taken AS (
    SELECT 'log' AS source,
        {DELIVERY_ID_SQL.format(config="next.config", seq="next.seq", part="next.part")} AS id,
        next.config, next.seq, next.part, next.kind, next.snapshot, c.attempts,
        next.at AS created_at, next.more, {_SENT_COLUMNS}
    FROM next JOIN leased c ON c.row_id = next.config JOIN a2a_tasks t ON t.id = next.task
)"""

TAKE_ROWS = f"WITH RECURSIVE {_TAKE_ROWS}\nSELECT * FROM rows_taken"
TAKE_LOG = f"WITH {_TAKE_LOG.format(room='$3')}\nSELECT * FROM log_taken"

# One take: up to $3 deliveries leased to $1 for $2 s, the pending rows first (in the room they
# leave), then the next delivery of configs whose log grew.
TAKE = f"""WITH RECURSIVE {_TAKE_ROWS},
{_TAKE_LOG.format(room="$3 - (SELECT count(*) FROM rows_taken)")}
SELECT * FROM rows_taken UNION ALL SELECT * FROM log_taken"""

# Where a settled delivery leaves its config: past its event once the whole task was sent (or
# nothing of its event follows), else past its part.
_PAST = """pos_seq = CASE WHEN s.kind = 'task' OR NOT s.more THEN s.seq + 1 ELSE s.seq END,
        pos_part = CASE WHEN s.kind = 'task' OR NOT s.more THEN -1 ELSE s.part END,
        started = true, attempts = 0, lease_token = NULL, lease_expires_at = NULL"""

# Deliveries the receivers took (2xx), settled together under lease $1: rows ($2 ids, $3
# statuses), and deliveries from the log ($4-$12), whose configs move past them and whose
# history rows are written here.
DELIVERED = f"""
WITH rows_done AS (
    UPDATE a2a_push_deliveries d SET state = 'delivered', delivered_at = now(),
        last_status = s.status, last_error = NULL, lease_token = NULL, lease_expires_at = NULL
    FROM unnest($2::uuid[], $3::integer[]) AS s (id, status), {NO_FLUSH}
    WHERE d.id = s.id AND d.lease_token = $1
), s AS (
    SELECT * FROM unnest($4::uuid[], $5::uuid[], $6::integer[], $7::integer[], $8::text[],
        $9::boolean[], $10::integer[], $11::integer[], $12::timestamptz[])
        AS s (id, config, seq, part, kind, more, attempts, status, at)
), moved AS (
    UPDATE a2a_push_configs c SET {_PAST}
    FROM s WHERE c.row_id = s.config AND c.lease_token = $1
    RETURNING s.*, c.task
)
INSERT INTO a2a_push_deliveries (id, config, task, seq, part, kind, state, attempts,
    last_status, delivered_at, created_at, next_attempt_at)
SELECT id, config, task, seq, part, kind, 'delivered', attempts, status, now(), at, now()
FROM moved
ON CONFLICT DO NOTHING
"""

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
     JOIN a2a_task_events e ON e.task = c.task AND e.seq >= c.pos_seq AND {_OWED}
     WHERE c.enabled AND NOT c.parked)"""


async def take(conn: Conn, lease: uuid.UUID, lease_s: float, limit: int) -> list[Record]:
    """Lease up to ``limit`` due deliveries to this dispatcher: pending rows first, then the
    next delivery of configs whose log grew."""
    rows: list[Record] = await conn.fetch(TAKE, lease, lease_s, limit)
    return rows


def _column(taken: list[tuple[Record, int]], name: str) -> list[Any]:
    return [row[name] for row, _ in taken]


async def delivered(conn: Conn, taken: list[tuple[Record, int]], lease: uuid.UUID) -> None:
    """Record deliveries the receivers took (2xx), with the status each answered."""
    rows = [(r, s) for r, s in taken if r["source"] == "row"]
    log = [(r, s) for r, s in taken if r["source"] == "log"]
    columns = ("id", "config", "seq", "part", "kind", "more", "attempts")
    await conn.execute(
        DELIVERED,
        lease,
        _column(rows, "id"),
        [s for _, s in rows],
        *(_column(log, name) for name in columns),
        [s for _, s in log],
        _column(log, "created_at"),
    )


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
