"""The resources one running gateway shares across requests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import asyncpg

from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.a2a.key_sets import KeySets
from a2a_continue.errors import AppError, DatabaseUnavailable
from a2a_continue.runtime.call_limits import AgentSlots
from a2a_continue.runtime.db import (
    CLIENT_GRACE_S,
    DB_CLIENT_STATE,
    DB_FAULTS,
    DB_SLOW,
    Conn,
    HeldConnections,
    Record,
    usable,
)
from a2a_continue.runtime.db import DB_DOWN as DB_DOWN
from a2a_continue.runtime.hub import Hub
from a2a_continue.runtime.open_streams import OpenStreams
from a2a_continue.runtime.secrets import Sealer
from a2a_continue.runtime.signing_keys import GatewayCardKey
from a2a_continue.settings import Settings

log = logging.getLogger(__name__)


class WatcherPort(Protocol):
    """What requests ask of this process's watcher (see ``background.watcher``)."""

    def room(self) -> int:
        """How many more tasks this process may follow."""
        ...

    def follow(self, row: Record) -> None:
        """Follow a task this process has just leased."""
        ...

    def nudge(self) -> None:
        """Pick up free live tasks now rather than at the next period."""
        ...


# Per task: until when loans fail at once, after one ran out of time. A request then waits
# on a stuck database once, not again at each step after it (recording an answer, releasing
# a claim, storing an idempotent answer).
_stuck_until: ContextVar[float] = ContextVar("a2ac_db_stuck_until", default=0.0)


@dataclass(frozen=True, slots=True)
class Gateway:
    """The pool, the outbound session and the credential sealer of one app; the event hub
    and the streams it serves."""

    settings: Settings
    pool: asyncpg.Pool
    session: aiohttp.ClientSession
    sealer: Sealer
    hub: Hub = field(default_factory=lambda: Hub(None, listen=False))
    open_streams: OpenStreams = field(default_factory=lambda: OpenStreams(10_000))
    watcher: WatcherPort | None = None
    targets: dict[tuple[Any, ...], AgentTarget] = field(default_factory=dict)
    held: HeldConnections | None = None
    chores: set[asyncio.Task[None]] = field(default_factory=set)
    # Signed agent cards (SPEC §18): the JWK sets cards are checked with, the card key.
    key_sets: KeySets = field(default_factory=KeySets)
    card_key: GatewayCardKey = field(default_factory=GatewayCardKey)
    slots: AgentSlots = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "slots", AgentSlots(self.settings.agent_concurrency))

    def connection(self) -> Lent:
        """Lend a pooled connection for an ``async with`` block; a database that cannot be
        reached, or does not answer within ``db_timeout_s`` (to lend a connection and run
        the block's statements, all told), is a 503."""
        return Lent(self)

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` past the request that starts it (the gateway's stop cancels it)."""
        task = asyncio.get_running_loop().create_task(work)
        self.chores.add(task)
        task.add_done_callback(self.chores.discard)

    async def stop_chores(self) -> None:
        """Cancel the background work still running and wait for it to end."""
        for task in list(self.chores):
            task.cancel()
        await asyncio.gather(*self.chores, return_exceptions=True)


async def _settle(gw: Gateway, conn: Any) -> None:
    """Give the pool a connection whose statement is being cancelled (terminated if the
    cancel or the rollback does not end within the database bound)."""
    try:
        if gw.held is not None:
            await gw.held.release(conn, False, gw.settings.db_timeout_s)
        else:
            await gw.pool.release(conn, timeout=gw.settings.db_timeout_s)
    except DB_FAULTS:
        pass  # the pool terminated it


class Lent:
    """One loan of a pooled connection (a class, not a generator: it is on every request's
    path twice, and a generator-based context manager costs several times more).

    One deadline bounds the loan: the wait for a connection (the pool's connect and its
    handshake included) and every statement of the block. When it passes, the connection
    is terminated, not closed: a frozen server would never answer a graceful close, and a
    connection whose statement the client gave up on is in an unknown state. A statement
    that ran out of its own time (the pool's ``command_timeout``, a little shorter) has
    been cancelled on the server by asyncpg: its connection goes back to the pool in the
    background, which waits for the cancel to land and rolls back (or terminates it), so
    the server stops the statement and the connection is never lent again mid-statement.
    Any other database fault, a server gone or a connection asyncpg can no longer use (a
    stopping server's goodbye read between two statements), terminates the connection and
    is a 503 too.
    """

    __slots__ = ("conn", "expired", "gw", "timer")

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.conn: Any = None
        self.expired = False
        self.timer: asyncio.TimerHandle | None = None

    def _slow(self) -> DatabaseUnavailable:
        bound = self.gw.settings.db_timeout_s
        return DatabaseUnavailable(
            f"the database did not answer within {bound:g} s; try again shortly"
        )

    def _stuck(self) -> DatabaseUnavailable:
        _stuck_until.set(asyncio.get_running_loop().time() + self.gw.settings.db_timeout_s)
        return self._slow()

    async def __aenter__(self) -> Conn:
        gw = self.gw
        loop = asyncio.get_running_loop()
        now = loop.time()
        if _stuck_until.get() > now:
            raise self._slow()
        deadline = now + gw.settings.db_timeout_s + CLIENT_GRACE_S
        conn = gw.held.take() if gw.held is not None else None
        if conn is None:
            try:
                async with asyncio.timeout_at(deadline):
                    if gw.held is not None:
                        conn = await gw.held.acquire()
                    else:
                        conn = await gw.pool.acquire()
            except DB_SLOW:
                raise self._stuck() from None
            except DB_DOWN:
                raise DatabaseUnavailable() from None
        self.conn = conn
        self.timer = loop.call_at(deadline, self._expire)
        return conn

    def _expire(self) -> None:
        """End the loan's connection: its statement fails at once, whatever the server does."""
        self.expired = True
        self._terminate()

    def _terminate(self) -> None:
        with suppress(asyncpg.InterfaceError):  # asyncpg already ended it
            self.conn.terminate()

    async def __aexit__(self, kind: Any, error: Any, trace: Any) -> None:
        gw, conn = self.gw, self.conn
        # Once the deadline has ended the connection, a statement caught mid-way can fail
        # with whatever asyncpg's torn-down protocol raises (an AttributeError, say): that
        # is the deadline too, never an internal error. The block's own refusals stay.
        fault = kind is not None and (
            issubclass(kind, DB_FAULTS)
            or (self.expired and issubclass(kind, Exception) and not issubclass(kind, AppError))
        )
        if fault and not self.expired and issubclass(kind, TimeoutError) and usable(conn):
            # Its statement timed out and asyncpg is cancelling it on the server: let the
            # pool wait for that (bounded) off the request's path.
            assert self.timer is not None
            self.timer.cancel()
            gw.in_background(_settle(gw, conn))
            raise self._stuck() from None
        if fault:
            if issubclass(kind, DB_CLIENT_STATE):
                log.warning(
                    "a database connection asyncpg could no longer use was ended: %s", error
                )
            # A connection that saw a fault is not lent again: nothing waits on its reset, and
            # one whose protocol is out of step (the server's goodbye read between statements)
            # is never handed to the next caller.
            self._terminate()
        try:
            if gw.held is not None:
                await gw.held.release(conn, kind is None and not self.expired)
            else:
                await gw.pool.release(conn)
        except DB_FAULTS:
            pass  # the deadline ended it during its reset; the pool has it back
        finally:
            assert self.timer is not None
            self.timer.cancel()
        if fault:
            if self.expired or issubclass(kind, DB_SLOW):
                raise self._stuck() from None
            raise DatabaseUnavailable() from None
