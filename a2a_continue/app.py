"""The application: routes, the edge layer in front of them, the lifespan resources."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Any

from starlette.routing import BaseRoute

from a2a_continue.background.push import Dispatcher
from a2a_continue.background.retention import pruning
from a2a_continue.background.sweeps import sweeping_claims, sweeping_keys
from a2a_continue.background.watcher import Watcher
from a2a_continue.core.limits.limiter import Limiter
from a2a_continue.core.tasks.interest import INTEREST_ROWS
from a2a_continue.facade import push
from a2a_continue.facade import routes as facade
from a2a_continue.http import console, docs, limit_routes, openapi, rest
from a2a_continue.http.edge import Edge
from a2a_continue.http.limited import limited
from a2a_continue.http.routes import ApiRoute
from a2a_continue.http.tokens import TokenVerifier
from a2a_continue.obs import metrics, telemetry
from a2a_continue.runtime.call_limits import agent_session
from a2a_continue.runtime.db import HeldConnections, Pool, QueryLogger, create_pool
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.hub import Hub
from a2a_continue.runtime.open_streams import OpenStreams
from a2a_continue.runtime.running import running
from a2a_continue.runtime.secrets import Sealer, decode_key
from a2a_continue.runtime.signing_keys import check_supplied, load_pem
from a2a_continue.settings import Settings, check_jwt_secret, public_base_url

log = logging.getLogger(__name__)

# The one route table: routing, the permission check and the API description derive from it.
# Each counted route is admitted by the limits of its caller and team first (SPEC §20).
ROUTES: list[ApiRoute] = limited(
    [
        *rest.ROUTES,
        *limit_routes.ROUTES,
        *openapi.ROUTES,
        *docs.ROUTES,
        *console.ROUTES,
        *facade.ROUTES,
    ]
)


def create_app(
    settings: Settings,
    *,
    routes: Sequence[ApiRoute | BaseRoute] | None = None,
    on_query: QueryLogger | None = None,
) -> Edge:
    """Build the gateway for ``settings`` (``routes`` and ``on_query`` serve the tests: a
    plain Starlette route among the routes is not in the table, so it is denied)."""
    if not settings.database_url:
        raise ValueError("create_app needs settings.database_url")
    if not (settings.jwt_secret or settings.jwks_url):
        raise ValueError("neither A2AC_JWT_SECRET nor A2AC_JWKS_URL is set")
    if settings.jwt_secret:
        check_jwt_secret(settings.jwt_secret)
    sealer = Sealer(decode_key(settings.encryption_key))
    if settings.push_signing_key:
        load_pem(settings.push_signing_key)  # a key that cannot sign stops the start
    check_supplied(settings.card_signing_key)
    database_url = settings.database_url
    routes = ROUTES if routes is None else routes
    tokens = TokenVerifier(settings)

    if telemetry.setup_tracing():
        on_query = _both(on_query, telemetry.statement_span)

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[dict[str, Any]]:
        # Each part is stopped in the reverse order it was started in, as the stack unwinds.
        async with AsyncExitStack() as stack:
            stack.callback(metrics.worker_exited, os.getpid())
            pool = await create_pool(
                database_url,
                settings.pool_size,
                on_query,
                timeout_s=settings.db_timeout_s,
                statement_cache=settings.db_statement_cache,
            )
            stack.push_async_callback(_close_pool, pool)
            held = HeldConnections(pool, settings.pool_size)
            stack.push_async_callback(held.close)
            session = agent_session(settings)
            stack.push_async_callback(session.close)
            hub = Hub(
                settings.listen_database_url or database_url,
                rows=INTEREST_ROWS,
                listen=settings.listen,
                poll_s=settings.stream_poll_s,
            )
            streams = OpenStreams(settings.max_streams)
            watcher = Watcher(settings)
            gateway = Gateway(
                settings, pool, session, sealer, hub, streams, held=held, watcher=watcher
            )
            stack.push_async_callback(gateway.stop_chores)
            # The server has drained or cancelled every request; let the cancelled ones
            # release their claims before the pool closes.
            stack.push_async_callback(_requests_released, edge)
            await hub.start()
            stack.push_async_callback(hub.stop)
            stack.push_async_callback(streams.close)
            await stack.enter_async_context(running(_pool_gauges(held), name="a2ac-pool-gauges"))
            await stack.enter_async_context(sweeping_keys(pool, settings.idempotency_sweep_s))
            await watcher.start(gateway)
            stack.push_async_callback(watcher.stop)
            dispatcher = Dispatcher(settings, push.delivery_body, push_issuer(settings))
            await dispatcher.start(gateway)
            stack.push_async_callback(dispatcher.stop)
            limiter = Limiter(gateway)
            await limiter.start()
            stack.push_async_callback(limiter.stop)
            await stack.enter_async_context(sweeping_claims(gateway))
            await stack.enter_async_context(pruning(gateway))
            yield {"gateway": gateway, "limiter": limiter}

    edge = Edge(routes, tokens, lifespan)
    return edge


def push_issuer(settings: Settings) -> str:
    """The `iss` of delivery JWTs: the gateway's public URL."""
    return public_base_url(settings)


# How long a stopping gateway gives cancelled requests to release their claims.
RELEASE_S = 5.0


async def _requests_released(edge: Edge) -> None:
    with suppress(TimeoutError):
        await asyncio.wait_for(edge.idle(), RELEASE_S)


async def _close_pool(pool: Pool) -> None:
    # A frozen database would never answer the graceful close: asyncpg terminates the
    # connections of a close cut short.
    with suppress(TimeoutError):
        await asyncio.wait_for(pool.close(), RELEASE_S)


async def _pool_gauges(held: HeldConnections, every_s: float = 1.0) -> None:
    """Keep the pool gauges of this process current (held connections are idle ones)."""
    while True:
        metrics.db_pool(held.pool.get_size(), held.pool.get_idle_size() + len(held.idle))
        await asyncio.sleep(every_s)


def _both(first: QueryLogger | None, second: QueryLogger) -> QueryLogger:
    if first is None:
        return second

    def both(record: Any) -> None:
        first(record)
        second(record)

    return both
