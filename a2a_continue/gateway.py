"""The resources one running gateway shares across requests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import aiohttp
import asyncpg

from a2a_continue.db import Conn
from a2a_continue.errors import DatabaseUnavailable
from a2a_continue.isolation import AgentSlots
from a2a_continue.live.hub import Hub
from a2a_continue.live.streams import Streams
from a2a_continue.secrets import Sealer
from a2a_continue.settings import Settings

# What a lost or refused database connection raises.
DB_DOWN = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InterfaceError,
)
# What a database that does not answer in time raises (the client's or the server's timer).
DB_SLOW = (TimeoutError, asyncpg.QueryCanceledError)


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
    slots: AgentSlots = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "slots", AgentSlots(self.settings.agent_concurrency))

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """Lend a pooled connection; a database that cannot be reached, or does not answer
        within ``db_timeout_s`` (to lend a connection or to run a statement), is a 503."""
        bound = self.settings.db_timeout_s
        slow = f"the database did not answer within {bound:g} s; try again shortly"
        try:
            conn = await self.pool.acquire(timeout=bound)
        except DB_SLOW:
            raise DatabaseUnavailable(slow) from None
        except DB_DOWN:
            raise DatabaseUnavailable() from None
        try:
            yield conn
        except DB_SLOW:
            raise DatabaseUnavailable(slow) from None
        except DB_DOWN:
            raise DatabaseUnavailable() from None
        finally:
            # The pool finishes a release it has begun even when this wait gives up.
            with suppress(TimeoutError):
                await asyncio.wait_for(self.pool.release(conn), bound)
