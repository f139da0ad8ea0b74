"""The resources one running gateway shares across requests."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import asyncpg

from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.agents import target_of
from a2a_continue.db import DB_DOWN as DB_DOWN
from a2a_continue.db import DB_SLOW, Conn, HeldConnections, Record
from a2a_continue.errors import DatabaseUnavailable
from a2a_continue.isolation import AgentSlots
from a2a_continue.live.hub import Hub
from a2a_continue.live.streams import Streams
from a2a_continue.secrets import Sealer
from a2a_continue.settings import Settings

if TYPE_CHECKING:
    from a2a_continue.live.watcher import Watcher

# Agent targets kept per process; a changed row (new URL, credentials…) makes a new key.
TARGETS_KEPT = 1024


@dataclass(frozen=True, slots=True)
class Gateway:
    """The pool, the outbound session and the credential sealer of one app; the event hub
    and the streams it serves."""

    settings: Settings
    pool: asyncpg.Pool
    session: aiohttp.ClientSession
    sealer: Sealer
    hub: Hub = field(default_factory=lambda: Hub(None, listen=False))
    streams: Streams = field(default_factory=lambda: Streams(1000))
    watcher: Watcher | None = None
    targets: dict[tuple[Any, ...], AgentTarget] = field(default_factory=dict)
    held: HeldConnections | None = None
    slots: AgentSlots = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "slots", AgentSlots(self.settings.agent_concurrency))

    def target(self, row: Record) -> AgentTarget:
        """The downstream target of an agent row; credentials opened and headers built once."""
        key = (
            row["agent_id"],
            row["endpoint_url"],
            row["protocol_version"],
            row["timeout_seconds"],
            row["auth_sealed"],
        )
        target = self.targets.get(key)
        if target is None:
            if len(self.targets) >= TARGETS_KEPT:
                self.targets.clear()
            target = target_of(row, self.sealer, self.settings.agent_timeout_s)
            self.targets[key] = target
        return target

    def connection(self) -> Lent:
        """Lend a pooled connection for an ``async with`` block; a database that cannot be
        reached, or does not answer within ``db_timeout_s`` (to lend a connection or to run a
        statement), is a 503."""
        return Lent(self)


class Lent:
    """One loan of a pooled connection (a class, not a generator: it is on every request's
    path twice, and a generator-based context manager costs several times more)."""

    __slots__ = ("conn", "gw")

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.conn: Any = None

    def _slow(self) -> DatabaseUnavailable:
        bound = self.gw.settings.db_timeout_s
        return DatabaseUnavailable(
            f"the database did not answer within {bound:g} s; try again shortly"
        )

    async def __aenter__(self) -> Conn:
        gw = self.gw
        bound = gw.settings.db_timeout_s
        try:
            if gw.held is not None:
                self.conn = await gw.held.acquire(bound)
            else:
                self.conn = await gw.pool.acquire(timeout=bound)
        except DB_SLOW:
            raise self._slow() from None
        except DB_DOWN:
            raise DatabaseUnavailable() from None
        conn: Conn = self.conn
        return conn

    async def __aexit__(self, kind: Any, error: Any, trace: Any) -> None:
        gw, conn = self.gw, self.conn
        if gw.held is not None:
            await gw.held.release(conn, kind is None)
        else:
            # The pool finishes a release it has begun even when this wait gives up.
            with suppress(TimeoutError):
                await asyncio.wait_for(gw.pool.release(conn), gw.settings.db_timeout_s)
        if kind is not None:
            if issubclass(kind, DB_SLOW):
                raise self._slow() from None
            if issubclass(kind, DB_DOWN):
                raise DatabaseUnavailable() from None
