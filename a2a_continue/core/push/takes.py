"""How push dispatchers find and lease due deliveries (SPEC §12, §22): pending rows first in
their config's queue, and the next delivery of each config whose task's log grew past its
position. ``FOR UPDATE SKIP LOCKED``: two dispatchers never take the same row or config.
The templates take the lease's length (``lease_s``) and the room (``room``) as SQL."""

from __future__ import annotations

from a2a_continue.core.push.owed import DELIVERY_ID_SQL, WINDOW, next_sql, window_sql

# The dispatchers' statements commit without waiting for the WAL flush: a take or a settle
# lost in a crash only means the delivery is sent again (at-least-once; the receiver dedupes
# on its id), and they stay off the flush queue the requests' commits wait in.
NO_FLUSH = "(SELECT set_config('synchronous_commit', 'off', true)) AS no_flush"

SENT_COLUMNS = """c.url, c.version, c.token_sealed, c.auth_scheme, c.credentials_sealed,
    t.task_id, t.context_id"""

# Pending rows (a failed attempt's retry, a redelivery, the previous outbox's queue): take up to
# $3 due ones under a lease ($1 for $2 s), first in their config's queue (order per config).
# SKIP LOCKED: two dispatchers never take the same row. The heads of the queues are found by
# walking the queue index one config at a time, so a take reads one row per config with pending
# rows, however many wait behind each.
ROWS_TAKEN = f"""head AS (
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
    ORDER BY h.next_attempt_at LIMIT {{room}}
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
        lease_expires_at = now() + make_interval(secs => {{lease_s}})
    FROM a2a_push_configs c, a2a_tasks t, {NO_FLUSH}
    -- Not even planned into a scan of the table when nothing is due (most rounds).
    WHERE EXISTS (SELECT 1 FROM due)
      AND d.id = ANY (ARRAY(SELECT due.id FROM due)) AND c.row_id = d.config AND t.id = d.task
    RETURNING 'row' AS source, d.id, d.config, d.seq, d.part, d.kind, d.snapshot, d.attempts,
        d.created_at, false AS more, {SENT_COLUMNS}
)"""

# Configs whose log grew past their position: lease up to {room} of them ($1 for $2 s) and read
# the next delivery of each from the next WINDOW events of its log. A config with a pending row
# waits for it (order). A config those events owe nothing moves past them (past its task's
# last event when they were all there is).
LOG_TAKEN = f"""cand AS (
    SELECT c.row_id FROM a2a_push_configs c JOIN a2a_tasks t ON t.id = c.task
    WHERE c.enabled AND NOT c.parked AND t.last_seq >= c.pos_seq
      AND (c.lease_expires_at IS NULL OR c.lease_expires_at < now()){{exclude}}
      AND NOT EXISTS (
          SELECT 1 FROM a2a_push_deliveries d WHERE d.config = c.row_id AND d.state = 'pending')
    LIMIT {{room}}
    FOR UPDATE OF c SKIP LOCKED
), next AS (
    SELECT c.row_id AS config, c.task, n.seq, n.part, n.kind, n.snapshot, n.at, n.more, w.last
    FROM cand JOIN a2a_push_configs c ON c.row_id = cand.row_id
    LEFT JOIN LATERAL {next_sql("c")} n ON true
    -- The last of the window's events when it is full (NULL: the window is all there is).
    CROSS JOIN LATERAL (
        SELECT CASE WHEN count(*) = {WINDOW} THEN max(e.seq) END AS last
        FROM {window_sql("c", WINDOW)}
    ) w
), leased AS (
    UPDATE a2a_push_configs c SET lease_token = $1, attempts = c.attempts + 1,
        lease_expires_at = now() + make_interval(secs => {{lease_s}})
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
        next.at AS created_at, next.more, {SENT_COLUMNS}
    FROM next JOIN leased c ON c.row_id = next.config JOIN a2a_tasks t ON t.id = next.task
)"""

TAKE_ARGS = {"lease_s": "$2", "room": "$3", "exclude": ""}
TAKE_ROWS = f"WITH RECURSIVE {ROWS_TAKEN.format(**TAKE_ARGS)}\nSELECT * FROM rows_taken"
TAKE_LOG = f"WITH {LOG_TAKEN.format(**TAKE_ARGS)}\nSELECT * FROM log_taken"

# One take: up to $3 deliveries leased to $1 for $2 s, the pending rows first (in the room they
# leave), then the next delivery of configs whose log grew.
TAKE = f"""WITH RECURSIVE {ROWS_TAKEN.format(**TAKE_ARGS)},
{LOG_TAKEN.format(**{**TAKE_ARGS, "room": "$3 - (SELECT count(*) FROM rows_taken)"})}
SELECT * FROM rows_taken UNION ALL SELECT * FROM log_taken"""
