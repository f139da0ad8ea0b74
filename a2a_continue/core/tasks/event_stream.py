"""The live event stream of a task (§8.3): replay from PostgreSQL, then follow live.

A stream's first read is one short query that also checks the caller may see the task;
between reads a stream holds no connection and waits, without a timer of its own, until the
hub wakes it (a notification, or the hub's one poll for the whole process). The streams of a
task woken together share one read of the new events; a stream reads with its caller's scope
again whenever who may see the task changed (`SCOPE_SQL`), and closes once it may not.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from a2a_continue.a2a.protocol import INTERRUPTED_STATES, TERMINAL_STATES
from a2a_continue.core.access.callers import TASK_VISIBLE, Caller
from a2a_continue.core.shapes.pagination import int_param
from a2a_continue.core.tasks.interest import SCOPE_SQL
from a2a_continue.core.tasks.models import EventOut
from a2a_continue.errors import Invalid, InvalidQuery, NotFound
from a2a_continue.runtime.db import Record
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.waiters import Waiter

BATCH = 200
UNTIL: dict[str, frozenset[str]] = {
    "terminal": TERMINAL_STATES,
    "interrupted": TERMINAL_STATES | INTERRUPTED_STATES,
}

# The task's current state and the next events after $6, in one statement; no row at all
# means the caller can no longer see the task (or it is gone). The events are read as a
# window of seqs ($6, $6 + $7], not "after $6, the first $7": a task's seqs have no gaps
# (each event takes last_seq + 1 in the statement that writes it), and a window reads at
# most $7 rows whatever the plan, where a LIMIT under a plan that expects a short log reads
# the task's whole log (100k events) to sort it.
READ_EVENTS = f"""
SELECT t.id AS row_id, t.state, t.last_seq, {SCOPE_SQL} AS scope,
       e.seq, e.type, e.previous_state, e.new_state, e.actor, e.data, e.created_at
FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
LEFT JOIN LATERAL (
    SELECT * FROM a2a_task_events e WHERE e.task = t.id AND e.seq > $6 AND e.seq <= $6::bigint + $7
    ORDER BY e.seq
) e ON true
WHERE t.agent_id = $4 AND t.task_id = $5 AND {TASK_VISIBLE}
ORDER BY e.seq
"""

# The same read by the task's row id, for every stream of the task at once: the scope it
# returns tells each stream whether its own check still holds.
READ_TASK_EVENTS = f"""
SELECT t.id AS row_id, t.state, t.last_seq, {SCOPE_SQL} AS scope,
       e.seq, e.type, e.previous_state, e.new_state, e.actor, e.data, e.created_at
FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
LEFT JOIN LATERAL (
    SELECT * FROM a2a_task_events e WHERE e.task = t.id AND e.seq > $2 AND e.seq <= $2::bigint + $3
    ORDER BY e.seq
) e ON true
WHERE t.id = $1
ORDER BY e.seq
"""


@dataclass(frozen=True, slots=True)
class Batch:
    """Events read in one go, with the task's state at that moment."""

    row_id: uuid.UUID
    state: str
    last_seq: int
    scope: str
    events: list[EventOut]
    # Every seq up to here has been read (the window's end, or the task's last seq).
    upto: int


def batch_of(rows: list[Record], after: int) -> Batch | None:
    """Shape the rows of a read after ``after`` (none: the task is out of sight)."""
    if not rows:
        return None
    events = [
        EventOut(
            seq=r["seq"],
            type=r["type"],
            previous_state=r["previous_state"],
            new_state=r["new_state"],
            actor=r["actor"],
            data=r["data"],
            created_at=r["created_at"],
        )
        for r in rows
        if r["seq"] is not None
    ]
    first = rows[0]
    upto = min(after + BATCH, first["last_seq"])
    return Batch(first["row_id"], first["state"], first["last_seq"], first["scope"], events, upto)


def start_after(headers: Mapping[str, str], params: Mapping[str, str]) -> int:
    """Where a stream starts: after `Last-Event-ID`, else after `?after=`, else from seq 1."""
    last_id = headers.get("last-event-id")
    if last_id is not None and last_id.strip():
        value = last_id.strip()
        if not value.isdigit() or int(value) > 2**31 - 1:
            msg = "must be the seq of an event (a whole number)"
            raise Invalid([{"loc": "$.headers.Last-Event-ID", "msg": msg}])
        return int(value)
    return int_param(params, "after", 0, 0, 2**31 - 1)


def until_states(params: Mapping[str, str]) -> frozenset[str]:
    """The states after which the stream closes: `terminal` (default) or `interrupted`."""
    until = params.get("until", "terminal")
    if until not in UNTIL:
        raise InvalidQuery("until", "must be 'terminal' or 'interrupted'")
    return UNTIL[until]


class EventStream:
    """One caller's stream of one task's events."""

    def __init__(
        self,
        gw: Gateway,
        caller: Caller,
        agent_id: uuid.UUID,
        task_id: str,
        after: int,
        until: frozenset[str],
    ) -> None:
        self.gw, self.caller, self.agent_id, self.task_id = gw, caller, agent_id, task_id
        self.cursor = after
        self.until = until
        self._first: Batch | None = None
        self._waiter: Waiter | None = None
        self.stopped = False

    def stop(self) -> None:
        """End the stream at its next step (its caller went away, or the server stops)."""
        self.stopped = True
        if self._waiter is not None:
            self._waiter.wake()

    async def read(self) -> Batch | None:
        """Read the next events after the cursor; None once the task is out of sight."""
        async with self.gw.connection() as conn:
            rows = await conn.fetch(
                READ_EVENTS,
                *self.caller.scope_args(),
                self.agent_id,
                self.task_id,
                self.cursor,
                BATCH,
            )
        return batch_of(rows, self.cursor)

    async def _read_task(self, row_id: uuid.UUID) -> Batch | None:
        async with self.gw.connection() as conn:
            rows = await conn.fetch(READ_TASK_EVENTS, row_id, self.cursor, BATCH)
        return batch_of(rows, self.cursor)

    async def read_next(self, waiter: Waiter, row_id: uuid.UUID, scope: str) -> Batch | None:
        """Read on: with the streams of the task woken together, unless who may see the task
        changed since this stream's check (then with its caller's scope again)."""
        if not waiter.recheck:
            cursor = self.cursor
            batch: Batch | None = await self.gw.hub.shared(
                row_id, cursor, lambda: self._read_task(row_id)
            )
            if batch is not None and batch.scope == scope:
                return batch
        waiter.recheck = False
        return await self.read()

    async def open(self) -> EventStream:
        """Check the task is visible (404 otherwise) and read the first events."""
        self._first = await self.read()
        if self._first is None:
            raise NotFound(f"task {self.task_id} not found")
        return self

    async def events(self) -> AsyncIterator[EventOut]:
        """Yield events in seq order until the `until` state, or until the task is out of sight."""
        async for event in self.follow(None):
            assert event is not None
            yield event

    async def follow(self, keepalive_s: float | None) -> AsyncIterator[EventOut | None]:
        """Yield events as `events` does, and None after each ``keepalive_s`` without one."""
        # Not kept: an idle stream holds no page of events.
        batch, self._first = self._first, None
        assert batch is not None, "open() the stream first"
        hub, loop = self.gw.hub, asyncio.get_running_loop()
        with hub.waiter(batch.row_id) as waiter:
            self._waiter = waiter
            waiter.agent = self.agent_id
            # A notification between the first read and the registration would be missed:
            # read once more straight away.
            waiter.wake()
            quiet_from = loop.time()
            while batch is not None and not self.stopped:
                for event in batch.events:
                    self.cursor = event.seq
                    yield event
                    if event.new_state in self.until:
                        return
                    quiet_from = loop.time()
                self.cursor = max(self.cursor, batch.upto)
                if self.cursor >= batch.last_seq:
                    if batch.state in self.until:
                        return
                    waiter.seen, waiter.scope = self.cursor, batch.scope
                    while not self.stopped:
                        # While the hub polls for it, the stream needs no timer but the
                        # keep-alive's; without the hub it re-reads every stream_poll_s.
                        poll_s = None if hub.polls else self.gw.settings.stream_poll_s
                        due = None if keepalive_s is None else quiet_from + keepalive_s
                        timeout = _sooner(poll_s, None if due is None else due - loop.time())
                        if await waiter.wait(timeout):
                            break
                        if due is not None and loop.time() >= due:
                            yield None
                            quiet_from = loop.time()
                        if poll_s is not None:
                            break
                    if self.stopped:
                        return
                batch = await self.read_next(waiter, batch.row_id, batch.scope)


def _sooner(first: float | None, second: float | None) -> float | None:
    """The shorter of two optional timeouts (never below 0)."""
    given = [t for t in (first, second) if t is not None]
    return max(0.0, min(given)) if given else None
