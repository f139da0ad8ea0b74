"""One PostgreSQL connection per process that LISTENs, fanned out to the streams waiting in it.

The connection listens only while at least one stream in this process waits, so events
written while none does cost neither PostgreSQL nor this process a notification. Through the
same connection the hub keeps one row in `a2a_stream_interest` per task its streams wait on
(this process's id, an expiry it refreshes): event writers notify only a task with such a
row, on any replica (see core.tasks.interest). Each time a task gains interest (its first
waiter, listening re-enabled, or after a reconnect) its waiters re-read once LISTEN is active
and the row is committed, which picks up the events committed before.

A notification only wakes readers, who then read the rows. Idle streams do not poll: the hub
alone checks, every few seconds and in one statement for all of them, whether a waited task
has events past what its streams saw, or changed who may see it (the rows' `news`), and wakes those;
so a notification lost (or a listener down) delays an event and never loses it. Agent
updates and deletions notify too (core.tasks.interest): they can end a stream's visibility.
Streams of one task woken together share one read of the new events (`shared`).

Other channels (the push outbox's, ``on_channel``) are listened on whenever the connection
listens, each waking one callback, which is also called after every (re)connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Any, Protocol, TypeVar

import asyncpg

from a2a_continue.runtime.db import Conn, NotDirect, Record, check_direct
from a2a_continue.runtime.running import cancel_and_wait
from a2a_continue.runtime.waiters import Waiter as Waiter

T = TypeVar("T")

log = logging.getLogger(__name__)

# Every statement that appends an event also notifies this channel with the task's row id,
# in the same transaction, when a live stream (on any replica) waits on the task (see
# core.tasks.interest). The streams wake and read the new rows.
EVENTS_CHANNEL = "a2ac_task_events"
# A notification about an agent (updated or deleted) names it after this prefix.
AGENT_PREFIX = "agent:"
# The push dispatchers' channel: an event a push config is owed notifies it while a dispatcher
# says it waits (`a2a_push_wake`), and a redelivery always does.
PUSH_CHANNEL = "a2ac_push"


class InterestRows(Protocol):
    """The statements on a process's stream-interest rows, which their owner
    (core.tasks.interest) gives the hub."""

    async def prepare(self, conn: Conn) -> None:
        """Make the connection ready for the rows' soft-state commits."""

    async def keep(
        self, conn: Conn, tasks: list[uuid.UUID], process: uuid.UUID, ttl_s: float
    ) -> None:
        """Write or extend the rows of ``tasks`` for ``ttl_s``."""

    async def drop(self, conn: Conn, process: uuid.UUID, tasks: list[uuid.UUID]) -> None:
        """Delete the process's rows of ``tasks``."""

    async def drop_all(self, conn: Conn, process: uuid.UUID) -> None:
        """Delete every row of the process."""

    async def sweep(self, conn: Conn) -> None:
        """Delete the rows long expired (of processes that died)."""

    async def news(
        self, conn: Conn, ids: list[uuid.UUID], seen: list[int], scopes: list[str | None]
    ) -> list[Record]:
        """The waited tasks with news: ``id``, ``last_seq`` (None: gone) and ``scope``."""


# Bound on each statement of the hub's connection (a cut connection is noticed by using it).
STATEMENT_S = 10.0


class Hub:
    """Listen on the events channel and wake the waiters of the task each notification names."""

    def __init__(
        self,
        database_url: str | None,
        *,
        rows: InterestRows | None = None,
        listen: bool = True,
        retry_s: float = 1.0,
        interest_ttl_s: float = 60.0,
        refresh_s: float = 20.0,
        poll_s: float = 3.0,
    ):
        if database_url is not None and rows is None:
            raise ValueError("a hub with a database needs its interest rows' statements")
        self.database_url = database_url
        self.rows = rows
        self.listen = listen and database_url is not None
        # With a database the hub's one poll stands in for every stream's (see `polls`).
        self.poll_s = poll_s
        self.retry_s = retry_s
        # An interest row lasts interest_ttl_s unless refreshed, which happens every refresh_s.
        self.interest_ttl_s = interest_ttl_s
        self.refresh_s = refresh_s
        # This process in `a2a_stream_interest` (one hub per process).
        self.process = uuid.uuid4()
        self.connected = asyncio.Event()
        # Whether the connection LISTENs now; only the background task changes it.
        self.listening = False
        self._waiters: dict[uuid.UUID, set[Waiter]] = {}
        # Tasks that may have an interest row of this process (written and not yet deleted),
        # across connections: a row left by a lost connection is deleted through the next.
        self._interest: set[uuid.UUID] = set()
        # Set when a task gained its first waiter or lost its last, or the connection was lost.
        self._changed = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        # Reads in flight per task, shared by the streams woken together (see `shared`).
        self._reads: dict[uuid.UUID, dict[Hashable, asyncio.Task[Any]]] = {}
        # Other channels this process listens on for as long as it is connected (the push
        # outbox's), each with what wakes on a notification and on every (re)connect.
        self._channels: dict[str, Callable[[], None]] = {}

    @property
    def _rows(self) -> InterestRows:
        assert self.rows is not None  # a hub that connects has them (see __init__)
        return self.rows

    @property
    def polls(self) -> bool:
        """Whether this hub's poll wakes its waiters now (else each stream polls on its own:
        no database, or the hub's connection is down)."""
        return self.connected.is_set()

    def on_channel(self, channel: str, wake: Callable[[], None]) -> None:
        """Call ``wake`` on each notification of ``channel`` and after each (re)connect."""
        self._channels[channel] = wake

    async def start(self) -> None:
        """Start listening (and polling) in the background, reconnecting as needed."""
        if self.database_url is not None and self._runner is None:
            self._runner = asyncio.create_task(self._run(), name="a2ac-listen")

    async def stop(self) -> None:
        """Stop listening, delete this process's interest rows (best effort) and disconnect."""
        runner, self._runner = self._runner, None
        await cancel_and_wait(runner)

    @contextlib.contextmanager
    def waiter(self, row_id: uuid.UUID) -> Iterator[Waiter]:
        """Register a waiter for one task for the block's duration."""
        waiter = Waiter()
        waiters = self._waiters.get(row_id)
        if waiters is None:
            waiters = self._waiters[row_id] = set()
            self._changed.set()
        waiters.add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get(row_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[row_id]
                    self._changed.set()

    def notify(self, payload: str) -> None:
        """Wake every waiter of the task a notification names (or of the agent's tasks)."""
        if payload.startswith(AGENT_PREFIX):
            self._agent_changed(payload.removeprefix(AGENT_PREFIX))
            return
        try:
            row_id = uuid.UUID(payload)
        except ValueError:
            return
        self.wake({row_id})

    def _agent_changed(self, payload: str) -> None:
        try:
            agent = uuid.UUID(payload)
        except ValueError:
            return
        for row_id, waiters in self._waiters.items():
            if any(w.agent == agent for w in waiters):
                self._reads.pop(row_id, None)
                for waiter in waiters:
                    waiter.recheck = True
                    waiter.wake()

    def shared(self, row_id: uuid.UUID, key: Hashable, read: Callable[[], Awaitable[T]]) -> Any:
        """Await ``read()`` of a task, or join the same read (same ``key``) already in flight.

        A read in flight is joined only until the next wake-up of its task: streams woken by
        a later notification read afresh (and those who joined the older read are woken too).
        The read runs on its own, so a stream that goes away does not cancel the others'.
        """
        reads = self._reads.setdefault(row_id, {})
        task = reads.get(key)
        if task is None:
            task = asyncio.ensure_future(read())
            reads[key] = task
            task.add_done_callback(lambda done: self._read_done(row_id, key, done))
        return asyncio.shield(task)

    def _read_done(self, row_id: uuid.UUID, key: Hashable, task: asyncio.Task[Any]) -> None:
        reads = self._reads.get(row_id)
        if reads is not None and reads.get(key) is task:
            del reads[key]
            if not reads:
                del self._reads[row_id]
        if not task.cancelled():
            task.exception()  # retrieved: each stream that awaited it got it

    def wake_all(self) -> None:
        """Wake every waiter (each re-reads its task)."""
        self.wake(set(self._waiters))

    def wake(self, row_ids: set[uuid.UUID]) -> None:
        """Wake the waiters of these tasks (news, or their interest just took effect)."""
        for row_id in row_ids:
            self._reads.pop(row_id, None)
            for waiter in self._waiters.get(row_id, ()):
                waiter.wake()

    def _on_notification(self, conn: Conn, pid: int, channel: str, payload: object) -> None:
        if isinstance(payload, str):
            self.notify(payload)

    async def _run(self) -> None:
        assert self.database_url is not None
        delay = self.retry_s
        while True:
            try:
                await self._listen_once(self.database_url)
                reason = "connection closed"
            except asyncio.CancelledError:
                raise
            except NotDirect as exc:
                # LISTEN through a pooler in transaction mode would listen in a server
                # session that the next transaction no longer holds: never listen so.
                reason = f"{exc}; point A2AC_LISTEN_DATABASE_URL straight at PostgreSQL"
                log.error("event listener refused: %s", reason)
            except Exception as exc:
                reason = type(exc).__name__
            # A listener that was connected retries soon; one that cannot connect backs off.
            was_connected = self.connected.is_set()
            delay = self.retry_s if was_connected else min(delay * 2, 30.0)
            self.connected.clear()
            if not was_connected:
                # The database refuses connections: its streams wake to read once (and end
                # if it is down), then poll on their own until the hub is back.
                self.wake_all()
            log.warning("event listener has no connection (%s); retrying in %g s", reason, delay)
            await asyncio.sleep(delay)

    async def _listen_once(self, url: str) -> None:
        conn = await asyncpg.connect(url)
        try:
            async with asyncio.timeout(STATEMENT_S):
                await check_direct(conn)
                await self._rows.prepare(conn)
        except BaseException:
            conn.terminate()
            raise
        lost = asyncio.Event()

        def on_lost(_conn: Conn) -> None:
            lost.set()
            self._changed.set()

        conn.add_termination_listener(on_lost)
        loop = asyncio.get_running_loop()
        # Tasks whose interest row this connection committed while listening (waiters woken).
        ready: set[uuid.UUID] = set()
        try:
            for channel, wake in self._channels.items() if self.listen else ():
                await conn.add_listener(channel, _waking(wake))
                # Anything notified while the connection was down is read now.
                wake()
            self.connected.set()
            refresh_at = loop.time() + self.refresh_s
            poll_at = loop.time() + self.poll_s
            while not lost.is_set():
                # Cleared before reading the waiters: a change while applying sets it again.
                self._changed.clear()
                if self.listen:
                    async with asyncio.timeout(STATEMENT_S):
                        await self._apply(conn, ready)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(min(refresh_at, poll_at)):
                        await self._changed.wait()
                if lost.is_set():
                    break
                if loop.time() >= poll_at:
                    async with asyncio.timeout(STATEMENT_S):
                        await self._poll(conn)
                    poll_at = loop.time() + self.poll_s
                if self.listen and loop.time() >= refresh_at:
                    # Also how a connection cut without a FIN is noticed: only by using it.
                    async with asyncio.timeout(STATEMENT_S):
                        await self._refresh(conn, ready)
                    refresh_at = loop.time() + self.refresh_s
        finally:
            self.listening = False
            if self._interest and not lost.is_set():
                # Stopping, or giving up on this connection (the next writes the rows anew):
                # delete this process's rows; should that fail, they expire.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._rows.drop_all(conn, self.process), 2)
                    self._interest.clear()
            with contextlib.suppress(Exception):
                await asyncio.shield(conn.close(timeout=2))

    async def _apply(self, conn: Conn, ready: set[uuid.UUID]) -> None:
        """Bring LISTEN and this process's interest rows in step with the waiters' tasks.

        A task that gains interest has its waiters woken only once LISTEN is active and its
        row is committed: they re-read, catching the events committed before, and the events
        committed after carry a notification. A writer whose statement began just before the
        row committed may still skip the notify (its snapshot does not see the row) and commit
        after that re-read: the hub's poll (`stream_poll_s`) bounds that delay,
        as a lost notification delays an event by a few seconds and never loses it.
        """
        want = set(self._waiters)
        if want and not self.listening:
            await conn.add_listener(EVENTS_CHANNEL, self._on_notification)
            self.listening = True
        gained = want - ready
        if gained:
            self._interest |= gained
            await self._keep(conn, gained)
            ready |= gained
            self.wake(gained)
        gone = self._interest - want
        if gone:
            await self._rows.drop(conn, self.process, list(gone))
            self._interest -= gone
            ready -= gone
        if not want and self.listening:
            await conn.remove_listener(EVENTS_CHANNEL, self._on_notification)
            self.listening = False

    async def _keep(self, conn: Conn, row_ids: set[uuid.UUID]) -> None:
        """Write or extend the interest rows of these tasks (a deleted task is skipped)."""
        for _ in range(3):
            try:
                await self._rows.keep(conn, list(row_ids), self.process, self.interest_ttl_s)
                return
            except asyncpg.ForeignKeyViolationError:
                # A task deleted while the statement ran: the next try's join leaves it out.
                continue
        log.warning("could not record interest in %d tasks being deleted", len(row_ids))

    async def _refresh(self, conn: Conn, ready: set[uuid.UUID]) -> None:
        """Extend this process's interest rows; delete rows long expired (of dead processes)."""
        if ready:
            await self._keep(conn, ready)
        await self._rows.sweep(conn)

    async def _poll(self, conn: Conn) -> None:
        """One statement for every waited task: wake the streams that have news (events past
        what they saw, another scope, or their task gone) that a notification missed."""
        ids, seen, scopes = [], [], []
        for row_id, held in self._waiters.items():
            reading = [w for w in held if w.seen is not None]
            if reading:  # a waiter not reading yet reads once it starts
                ids.append(row_id)
                seen.append(min(w.seen for w in reading if w.seen is not None))
                scope = {w.scope for w in reading}
                scopes.append(scope.pop() if len(scope) == 1 else None)
        if not ids:
            return
        rows = await self._rows.news(conn, ids, seen, scopes)
        for row in rows:
            waiters = self._waiters.get(row["id"])
            if not waiters:
                continue
            last_seq, scope = row["last_seq"], row["scope"]
            news = False
            for waiter in waiters:
                if waiter.seen is None:
                    continue  # not reading yet: it reads once it starts
                if last_seq is None or (waiter.scope is not None and waiter.scope != scope):
                    waiter.recheck = news = True
                elif last_seq > waiter.seen:
                    news = True
            if news:
                self.wake({row["id"]})


def _waking(wake: Callable[[], None]) -> Callable[[Conn, int, str, object], None]:
    """A listener callback that only wakes (the payload is not read)."""

    def on_notification(conn: Conn, pid: int, channel: str, payload: object) -> None:
        wake()

    return on_notification
