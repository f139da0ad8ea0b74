"""One PostgreSQL connection per process that LISTENs, fanned out to the streams waiting in it.

The connection listens only while at least one stream in this process waits, so events
written while none does cost neither PostgreSQL nor this process a notification. Each time
listening starts (first waiter, re-enabled, or after a reconnect) every waiter re-reads, which
picks up the events committed before LISTEN took effect.

A notification only wakes readers, who then read the rows; streams also re-read every few
seconds, so a notification lost (or a listener down) delays an event and never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterator

import asyncpg

from a2a_continue.db import Conn
from a2a_continue.tasks import EVENTS_CHANNEL

log = logging.getLogger(__name__)


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

    def __init__(self, database_url: str | None, *, listen: bool = True, retry_s: float = 1.0):
        self.database_url = database_url
        self.listen = listen and database_url is not None
        self.retry_s = retry_s
        self.connected = asyncio.Event()
        # Whether the connection LISTENs now; only the background task changes it.
        self.listening = False
        self._waiters: dict[uuid.UUID, set[Waiter]] = {}
        # Set when whether any waiter exists may have flipped, or the connection was lost.
        self._changed = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start listening in the background (reconnecting as needed)."""
        if self.listen and self._runner is None:
            self._runner = asyncio.create_task(self._run(), name="a2ac-listen")

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner

    @contextlib.contextmanager
    def waiter(self, row_id: uuid.UUID) -> Iterator[Waiter]:
        """Register a waiter for one task for the block's duration."""
        waiter = Waiter()
        if not self._waiters:
            self._changed.set()
        self._waiters.setdefault(row_id, set()).add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get(row_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[row_id]
                    if not self._waiters:
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
        """Wake every waiter (when listening starts, notifications may have been missed)."""
        for waiters in self._waiters.values():
            for waiter in waiters:
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
            except Exception as exc:
                reason = type(exc).__name__
            # A listener that was connected retries soon; one that cannot connect backs off.
            delay = self.retry_s if self.connected.is_set() else min(delay * 2, 30.0)
            self.connected.clear()
            log.warning("event listener has no connection (%s); retrying in %g s", reason, delay)
            await asyncio.sleep(delay)

    async def _listen_once(self, url: str) -> None:
        conn = await asyncpg.connect(url)
        lost = asyncio.Event()

        def on_lost(_conn: Conn) -> None:
            lost.set()
            self._changed.set()

        conn.add_termination_listener(on_lost)
        loop = asyncio.get_running_loop()
        try:
            self.connected.set()
            check_at = loop.time() + 30
            while not lost.is_set():
                # Cleared before reading the waiters: a change while applying sets it again.
                self._changed.clear()
                await self._apply(conn)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(check_at):
                        await self._changed.wait()
                if not lost.is_set() and loop.time() >= check_at:
                    # A connection cut without a FIN is only noticed by using it.
                    async with asyncio.timeout(10):
                        await conn.fetchval("SELECT 1")
                    check_at = loop.time() + 30
        finally:
            self.listening = False
            with contextlib.suppress(Exception):
                await asyncio.shield(conn.close(timeout=2))

    async def _apply(self, conn: Conn) -> None:
        """LISTEN if any waiter exists, UNLISTEN if none does; wake all when listening starts."""
        want = bool(self._waiters)
        if want and not self.listening:
            await conn.add_listener(EVENTS_CHANNEL, self._on_notification)
            self.listening = True
            self.wake_all()
        elif not want and self.listening:
            await conn.remove_listener(EVENTS_CHANNEL, self._on_notification)
            self.listening = False
