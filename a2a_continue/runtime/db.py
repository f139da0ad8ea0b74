"""The connection pool, and what a connection is checked for."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import asyncpg
import msgspec
from asyncpg.pool import PoolConnectionProxy

from a2a_continue.errors import DatabaseUnavailable
from a2a_continue.limits import encode_storable_json

log = logging.getLogger(__name__)

Pool = asyncpg.Pool
Connection = asyncpg.Connection
# What query functions accept: a plain connection or one lent by the pool.
Conn = asyncpg.Connection | PoolConnectionProxy
Record = asyncpg.Record
QueryLogger = Callable[[Any], None]

# What asyncpg raises for a connection it can no longer use: a stopping server ends each
# session with an error (57P01) and then the socket, and a connection idle between the two
# (one event-loop turn, or longer on a busy process) has read an answer no statement asked
# for, so the next statement on it fails with "cannot switch to state …; another operation
# (2) is in progress" (asyncpg aborts it then); and no host of a list being the primary
# during a failover (TargetServerAttributeNotMatched). Nothing reveals the first before use.
DB_CLIENT_STATE = (asyncpg.InternalClientError,)
# What a lost, refused, stopping or starting database raises: the client's connection
# errors and the server's 08 (connection), 53 (resources) and 57 (shutdown, "cannot connect
# now") classes.
DB_DOWN = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InsufficientResourcesError,
    asyncpg.OperatorInterventionError,
    asyncpg.InterfaceError,
    *DB_CLIENT_STATE,
)
# What a database that does not answer in time raises (the client's or the server's timer);
# checked before DB_DOWN, which holds QueryCanceledError's class.
DB_SLOW = (TimeoutError, asyncpg.QueryCanceledError)
DB_FAULTS = DB_SLOW + DB_DOWN

# A loan's own bound comes this long after each statement's (`command_timeout`), so that a
# slow statement is cancelled by its own timer (asyncpg sends PostgreSQL a cancel request,
# which a pooler forwards, and the connection stays usable) and the loan's bound ends only
# what that leaves: a frozen server, a wait for a connection, a block of several statements.
CLIENT_GRACE_S = 0.25


def as_unavailable(exc: BaseException) -> DatabaseUnavailable | None:
    """The 503 for a database fault, else None."""
    return DatabaseUnavailable() if isinstance(exc, DB_FAULTS) else None


async def _init_connection(conn: Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name, encoder=encode_storable_json, decoder=msgspec.json.decode, schema="pg_catalog"
        )


async def _keep_session(conn: Connection) -> None:
    # The service keeps no session state (no LISTEN, no session locks, no SET), so a
    # released connection needs no reset query: one round trip fewer per request.
    return None


async def create_pool(
    url: str,
    size: int,
    on_query: QueryLogger | None = None,
    *,
    timeout_s: float | None = None,
    statement_cache: int = 100,
) -> Pool:
    """Open the pool; ``on_query`` sees every statement (used to count round trips).

    ``timeout_s`` bounds each connect and each statement, on the client's clock: a statement
    past it is cancelled on the server (a cancel request, which PgBouncer forwards) and
    fails with TimeoutError. No startup parameter is sent (a pooler refuses those it does
    not know, such as ``statement_timeout``). A loan's whole wait is bounded by the gateway
    (`Gateway.connection`). ``statement_cache`` 0 turns off asyncpg's prepared-statement
    cache (for a pooler in transaction mode, where a named statement prepared in one
    transaction is gone in the next).
    """

    async def init(conn: Connection) -> None:
        await _init_connection(conn)
        if on_query is not None:
            conn.add_query_logger(on_query)

    # min_size=0: connections open on first use, so the app starts while the database is
    # down and /readyz (and every route) answers 503 instead of the process dying.
    bounds: dict[str, Any] = {}
    if timeout_s is not None:
        bounds = {"timeout": timeout_s, "command_timeout": timeout_s}
    pool = await asyncpg.create_pool(
        url,
        min_size=0,
        max_size=size,
        init=init,
        reset=_keep_session,
        statement_cache_size=statement_cache,
        **bounds,
    )
    assert pool is not None
    return pool


class HeldConnections:
    """Connections kept out of the pool between statements, so lending one is a list pop.

    asyncpg's own acquire and release cost more than a short statement (a queue, a proxy
    object and a shielded task each way). A connection that ends its turn cleanly goes to
    the next waiting caller or waits here; one that saw any error goes back to the pool,
    which checks it. At most ``keep`` (the pool's size) are out of the pool at once, and a
    caller beyond that waits here, never inside the pool, so nothing waits on a connection
    parked in this list.
    """

    def __init__(self, pool: Pool, keep: int) -> None:
        self.pool = pool
        self.keep = keep
        self.out = 0
        self.idle: list[Any] = []
        self.waiters: deque[asyncio.Future[Any]] = deque()

    def take(self) -> Any:
        """A held connection still open, or None; never waits."""
        while self.idle:
            conn = self.idle.pop()
            if usable(conn):
                return conn
            # Its server end went away while it waited here (a restart, a terminated
            # backend): the pool replaces it, rather than a caller getting a 503 for it.
            self._drop(conn)
        return None

    def _drop(self, conn: Any) -> None:
        """End a held connection that closed; the pool opens another in its place."""
        self.out -= 1
        with suppress(asyncpg.InterfaceError):  # asyncpg gave it back itself
            conn.terminate()

    async def acquire(self, wait_s: float | None = None) -> Any:
        """A connection: a held one if any, else one from the pool (waiting up to wait_s)."""
        conn = self.take()
        if conn is not None:
            return conn
        if self.out < self.keep:
            self.out += 1
            try:
                return await self.pool.acquire(timeout=wait_s)
            except BaseException:
                self.out -= 1
                self._wake()
                raise
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            async with asyncio.timeout(wait_s):
                conn = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._hand_on(waiter.result())
            else:
                with suppress(ValueError):
                    self.waiters.remove(waiter)
            raise
        if conn is None or not usable(conn):  # room at the pool, or one that closed since
            if conn is not None:
                self._drop(conn)
            return await self.acquire(wait_s)
        return conn

    async def release(self, conn: Any, clean: bool, timeout_s: float | None = None) -> None:
        """Pass on a connection that ended its turn cleanly; return any other to the pool
        (which waits for a cancelled statement to end and rolls back, within ``timeout_s``,
        else terminates the connection)."""
        if clean and usable(conn) and not conn.is_in_transaction():
            self._hand_on(conn)
            return
        self.out -= 1
        try:
            await self.pool.release(conn, timeout=timeout_s)
        finally:
            self._wake()

    def _hand_on(self, conn: Any) -> None:
        """Give a connection (None: room at the pool) to the first waiter, else keep it."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        if conn is not None:
            self.idle.append(conn)

    def _wake(self) -> None:
        if self.waiters:
            self._hand_on(None)

    async def close(self) -> None:
        """Give every held connection back to the pool (before closing it)."""
        idle, self.idle = self.idle, []
        self.out -= len(idle)
        for conn in idle:
            await self.pool.release(conn)


def usable(conn: Any) -> bool:
    """Tell whether a lent connection is still open (asyncpg detaches one that closed)."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:
        return False


class NotDirect(Exception):
    """A connection that does not end at a PostgreSQL session of its own (a pooler between)."""


async def check_direct(conn: Conn) -> None:
    """Refuse a connection whose statements may run in more than one PostgreSQL session.

    PostgreSQL announces its backend's pid when a connection opens; a pooler announces one
    of its own (PgBouncer a random key). So the pid the connection announced, and the
    ``pg_backend_pid()`` of two statements run one after the other (each its own
    transaction), are all the same only on a connection straight to PostgreSQL.
    """
    announced = conn.get_server_pid()
    first = await conn.fetchval("SELECT pg_backend_pid()")
    second = await conn.fetchval("SELECT pg_backend_pid()")
    if not announced == first == second:
        raise NotDirect(
            "the connection does not go straight to PostgreSQL (a connection pooler is"
            f" in between: pid announced {announced}, then {first} and {second})"
        )
