"""What a push config's task's log still owes it (SPEC §22): the deliveries past its position,
read from the events in seq order, with the id each is sent under.

An event a push config is owed carries the task as its statement left it (`pushed`, written by
the event's own writer, core/tasks/store.py). A config's position (`pos_seq`, `pos_part`) says
what is settled: every delivery before it. A delivery made from the log has the id
``delivery_id(config, seq, part)``, the same on every attempt, by any process.
"""

from __future__ import annotations

import hashlib
import uuid

from a2a_continue.core.tasks.store import owes_push

# An event `e` that push configs are owed.
OWED = owes_push("e.type", "e.data")

# What event `e`'s deliveries are built from: what it carries, or, for an event the previous
# release appended without it (a rolling upgrade), the task as it stands.
_PUSHED = """COALESCE(e.pushed, (SELECT jsonb_build_object('state', t.state,
        'statusMessage', t.status_message, 'artifacts', t.artifacts)
    FROM a2a_tasks t WHERE t.id = e.task))"""

# The id of the delivery of part `part` of event `seq` to config `config` (SQL of the three).
DELIVERY_ID_SQL = "md5({config}::text || '/' || {seq} || '/' || {part})::uuid"


def delivery_id(config: uuid.UUID, seq: int, part: int) -> uuid.UUID:
    """The ``A2A-Delivery-Id`` of one delivery made from the log (as ``DELIVERY_ID_SQL``)."""
    return uuid.UUID(hashlib.md5(f"{config}/{seq}/{part}".encode()).hexdigest())


def _events(c: str) -> str:
    """The condition on events ``e`` that may owe config ``c`` a delivery: its task's, from its
    position on, that carry a snapshot (after an opening's seq)."""
    return f"""e.task = {c}.task AND e.seq >= {c}.pos_seq AND {OWED}
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


# How many events a take reads past a config's position (one owing nothing is rare: an
# event whose parts were all sent before a crash, an update naming no stored artifact).
WINDOW = 4


def next_sql(c: str) -> str:
    """The next delivery config ``c`` is owed within its next WINDOW events, as a lateral
    (``seq`` NULL: none), and whether another part of its event follows it (``more``)."""
    return f"""(
        SELECT q.*, COALESCE(lead(q.seq) OVER (ORDER BY q.seq, q.part) = q.seq, false) AS more
        FROM ({parts_sql(c, WINDOW)} ORDER BY seq, part LIMIT 2) q
        ORDER BY q.seq, q.part LIMIT 1
    )"""
