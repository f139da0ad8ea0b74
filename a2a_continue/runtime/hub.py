"""One PostgreSQL connection per process that LISTENs, fanned out to the streams waiting in it.

The connection listens only while at least one stream in this process waits, so events
written while none does cost neither PostgreSQL nor this process a notification. Through the
same connection the hub keeps one row in `a2a_stream_interest` per task its streams wait on
(this process's id, an expiry it refreshes): event writers notify only a task with such a
row, on any replica (see `notify_sql`). Each time a task gains interest (its first
waiter, listening re-enabled, or after a reconnect) its waiters re-read once LISTEN is active
and the row is committed, which picks up the events committed before.

A notification only wakes readers, who then read the rows; streams also re-read every few
seconds, so a notification lost (or a listener down) delays an event and never loses it.

Other channels (the push outbox's, ``on_channel``) are listened on whenever the connection is
up, each waking one callback, which is also called after every (re)connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator

import asyncpg

from a2a_continue.runtime.db import Conn, NotDirect, check_direct

log = logging.getLogger(__name__)

# Every statement that appends an event also notifies this channel with the task's row id,
# in the same transaction, when a live stream (on any replica) waits on the task: see
# notify_sql. The streams wake and read the new rows.
EVENTS_CHANNEL = "a2ac_task_events"

# Bound on each statement of the hub's connection (a cut connection is noticed by using it).
STATEMENT_S = 10.0


def notify_sql(task_expr: str) -> str:
    """SQL notifying the events channel with the task ``task_expr`` names, if a stream waits.

    Only a task with an unexpired row in `a2a_stream_interest` (each process's hub keeps one
    per task its streams wait on) is notified: a NOTIFY holds a database-wide lock until its
    commit is flushed, so notifying commits queue behind each other, and most tasks have no
    stream waiting. The value is NULL either way. Qualify ``task_expr`` (``appended.task``):
    a bare ``task`` would name the interest row's own column inside the subquery.
    """
    return (
        "CASE WHEN EXISTS (SELECT 1 FROM a2a_stream_interest i"
        f" WHERE i.task = {task_expr} AND i.expires_at > now())"
        f" THEN pg_notify('{EVENTS_CHANNEL}', {task_expr}::text) END"
    )


# Write (or extend) this process's interest rows for the tasks in $1. The join leaves out a
# task already deleted; one deleted while the statement runs fails the foreign key (_keep).
KEEP_INTEREST = """INSERT INTO a2a_stream_interest (task, process, expires_at)
SELECT t.id, $2, now() + make_interval(secs => $3)
FROM unnest($1::uuid[]) AS w (id) JOIN a2a_tasks t ON t.id = w.id
ON CONFLICT (task, process) DO UPDATE SET expires_at = EXCLUDED.expires_at"""

DROP_INTEREST = "DELETE FROM a2a_stream_interest WHERE process = $1 AND task = ANY($2::uuid[])"

DROP_ALL_INTEREST = "DELETE FROM a2a_stream_interest WHERE process = $1"

# Rows of a process that died without deleting them: expired, they no longer cause notifies;
# any hub's refresh deletes them a while later.
SWEEP_INTEREST = "DELETE FROM a2a_stream_interest WHERE expires_at < now() - interval '5 minutes'"


class Waiter:
    """What one stream waits on: a wake-up for its task, or the fallback poll interval."""

    def __init__(self) -> None:
        self._woken = asyncio.Event()

    def wake(self) -> None:
        """Wake the stream (a notification for its task, or a listener that reconnected)."""
        self._woken.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait until woken or ``timeout_s`` pass; return whether it was woken. Re-arms."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._woken.wait()
        except TimeoutError:
            return False
        finally:
            self._woken.clear()
        return True


class Hub:
    """Listen on the events channel and wake the waiters of the task each notification names."""

    def __init__(
        self,
        database_url: str | None,
        *,
        listen: bool = True,
        retry_s: float = 1.0,
        interest_ttl_s: float = 60.0,
        refresh_s: float = 20.0,
    ):
        self.database_url = database_url
        self.listen = listen and database_url is not None
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
        # Other channels this process listens on for as long as it is connected (the push
        # outbox's), each with what wakes on a notification and on every (re)connect.
        self._channels: dict[str, Callable[[], None]] = {}

    def on_channel(self, channel: str, wake: Callable[[], None]) -> None:
        """Call ``wake`` on each notification of ``channel`` and after each (re)connect."""
        self._channels[channel] = wake

    async def start(self) -> None:
        """Start listening in the background (reconnecting as needed)."""
        if self.listen and self._runner is None:
            self._runner = asyncio.create_task(self._run(), name="a2ac-listen")

    async def stop(self) -> None:
        """Stop listening, delete this process's interest rows (best effort) and disconnect."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner

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
        """Wake every waiter of the task a notification names."""
        try:
            row_id = uuid.UUID(payload)
        except ValueError:
            return
        for waiter in self._waiters.get(row_id, ()):
            waiter.wake()

    def wake_all(self) -> None:
        """Wake every waiter (each re-reads its task)."""
        self.wake(set(self._waiters))

    def wake(self, row_ids: set[uuid.UUID]) -> None:
        """Wake the waiters of these tasks (their interest just took effect)."""
        for row_id in row_ids:
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
            delay = self.retry_s if self.connected.is_set() else min(delay * 2, 30.0)
            self.connected.clear()
            log.warning("event listener has no connection (%s); retrying in %g s", reason, delay)
            await asyncio.sleep(delay)

    async def _listen_once(self, url: str) -> None:
        conn = await asyncpg.connect(url)
        try:
            async with asyncio.timeout(STATEMENT_S):
                await check_direct(conn)
                # Interest rows are soft state (one lost in a crash costs a poll interval
                # at most), so their commits need not wait for the WAL flush. Set in the
                # session, not as a startup parameter, which a pooler would refuse before
                # the check above could say why.
                await conn.execute("SET synchronous_commit = off")
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
            for channel, wake in self._channels.items():
                await conn.add_listener(channel, _waking(wake))
                # Anything notified while the connection was down is read now.
                wake()
            self.connected.set()
            refresh_at = loop.time() + self.refresh_s
            while not lost.is_set():
                # Cleared before reading the waiters: a change while applying sets it again.
                self._changed.clear()
                async with asyncio.timeout(STATEMENT_S):
                    await self._apply(conn, ready)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(refresh_at):
                        await self._changed.wait()
                if not lost.is_set() and loop.time() >= refresh_at:
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
                    await asyncio.wait_for(conn.execute(DROP_ALL_INTEREST, self.process), 2)
                    self._interest.clear()
            with contextlib.suppress(Exception):
                await asyncio.shield(conn.close(timeout=2))

    async def _apply(self, conn: Conn, ready: set[uuid.UUID]) -> None:
        """Bring LISTEN and this process's interest rows in step with the waiters' tasks.

        A task that gains interest has its waiters woken only once LISTEN is active and its
        row is committed: they re-read, catching the events committed before, and the events
        committed after carry a notification. A writer whose statement began just before the
        row committed may still skip the notify (its snapshot does not see the row) and commit
        after that re-read: the stream's periodic re-read (`stream_poll_s`) bounds that delay,
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
            await conn.execute(DROP_INTEREST, self.process, list(gone))
            self._interest -= gone
            ready -= gone
        if not want and self.listening:
            await conn.remove_listener(EVENTS_CHANNEL, self._on_notification)
            self.listening = False

    async def _keep(self, conn: Conn, row_ids: set[uuid.UUID]) -> None:
        """Write or extend the interest rows of these tasks (a deleted task is skipped)."""
        for _ in range(3):
            try:
                await conn.execute(KEEP_INTEREST, list(row_ids), self.process, self.interest_ttl_s)
                return
            except asyncpg.ForeignKeyViolationError:
                # A task deleted while the statement ran: the next try's join leaves it out.
                continue
        log.warning("could not record interest in %d tasks being deleted", len(row_ids))

    async def _refresh(self, conn: Conn, ready: set[uuid.UUID]) -> None:
        """Extend this process's interest rows; delete rows long expired (of dead processes)."""
        if ready:
            await self._keep(conn, ready)
        await conn.execute(SWEEP_INTEREST)


def _waking(wake: Callable[[], None]) -> Callable[[Conn, int, str, object], None]:
    """A listener callback that only wakes (the payload is not read)."""

    def on_notification(conn: Conn, pid: int, channel: str, payload: object) -> None:
        wake()

    return on_notification
