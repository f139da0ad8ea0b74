"""The resources one running gateway shares across requests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
import asyncpg

from a2a_continue.db import Conn
from a2a_continue.errors import DatabaseUnavailable
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

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """Lend a pooled connection; a database that cannot be reached becomes a 503."""
        try:
            async with self.pool.acquire() as conn:
                yield conn
        except DB_DOWN:
            raise DatabaseUnavailable() from None
