"""The Starlette application: routes, the permission middleware, the lifespan resources."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from a2a_continue import handlers as h
from a2a_continue import openapi
from a2a_continue.auth import PermissionMiddleware
from a2a_continue.claims import sweeping_claims
from a2a_continue.db import QueryLogger, create_pool
from a2a_continue.errors import AppError, problem_response
from a2a_continue.facade import handlers as facade
from a2a_continue.gateway import Gateway
from a2a_continue.idempotency import Replayed, on_replayed, start_sweeper, stop_sweeper
from a2a_continue.isolation import agent_session
from a2a_continue.live.hub import Hub
from a2a_continue.live.streams import Streams
from a2a_continue.paths import RawPathRouting
from a2a_continue.secrets import Sealer, decode_key
from a2a_continue.settings import Settings, check_jwt_secret
from a2a_continue.tokens import TokenVerifier

log = logging.getLogger(__name__)

TASK = "/v1/a2a/{agent_id:uuid}/tasks/{task_id:task_id}"
FACADE = "/a2a/{agent_id:uuid}"

ROUTES = [
    Route("/healthz", h.healthz, methods=["GET"]),
    Route("/readyz", h.readyz, methods=["GET"]),
    Route("/v1/a2a/agents", h.list_agents, methods=["GET"]),
    Route("/v1/a2a/agents", h.create_agent, methods=["POST"]),
    Route("/v1/a2a/agents/{agent_id:uuid}", h.get_agent, methods=["GET"]),
    Route("/v1/a2a/agents/{agent_id:uuid}", h.update_agent, methods=["PATCH"]),
    Route("/v1/a2a/agents/{agent_id:uuid}", h.delete_agent, methods=["DELETE"]),
    Route("/v1/a2a/{agent_id:uuid}/messages", h.start_task, methods=["POST"]),
    Route("/v1/a2a/{agent_id:uuid}/tasks", h.list_tasks, methods=["GET"]),
    Route(TASK, h.get_task, methods=["GET"]),
    Route(TASK + "/events", h.list_events, methods=["GET"]),
    Route(TASK + "/messages", h.continue_task, methods=["POST"]),
    Route(TASK + "/cancel", h.cancel_task, methods=["POST"]),
    *openapi.ROUTES,
    Route(FACADE + "/.well-known/agent-card.json", facade.agent_card, methods=["GET"]),
    Route(FACADE, facade.agent_rpc, methods=["POST"]),
]


async def on_app_error(request: Request, exc: Exception) -> Response:
    """Render a gateway error as problem+json."""
    assert isinstance(exc, AppError)
    return problem_response(exc)


async def on_http_error(request: Request, exc: Exception) -> Response:
    """Render Starlette's own HTTP errors as problem+json."""
    assert isinstance(exc, HTTPException)
    error = AppError(exc.detail)
    error.status, error.title = exc.status_code, exc.detail
    error.slug = "not-found" if exc.status_code == 404 else f"http-{exc.status_code}"
    return problem_response(error)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    """Log a bug and answer 500 without its details."""
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(AppError("an unexpected error occurred; it has been logged"))


def create_app(
    settings: Settings, *, routes: list[Route] | None = None, on_query: QueryLogger | None = None
) -> Starlette:
    """Build the gateway for ``settings`` (``routes`` and ``on_query`` serve the tests)."""
    if not settings.database_url:
        raise ValueError("create_app needs settings.database_url")
    if not (settings.jwt_secret or settings.jwks_url):
        raise ValueError("neither A2AC_JWT_SECRET nor A2AC_JWKS_URL is set")
    if settings.jwt_secret:
        check_jwt_secret(settings.jwt_secret)
    sealer = Sealer(decode_key(settings.encryption_key))
    database_url = settings.database_url
    routes = ROUTES if routes is None else routes
    tokens = TokenVerifier(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        pool = await create_pool(
            database_url, settings.pool_size, on_query, timeout_s=settings.db_timeout_s
        )
        sweeper = start_sweeper(pool, settings.idempotency_sweep_s)
        session = agent_session(settings)
        hub = Hub(database_url, listen=settings.listen)
        streams = Streams(settings.max_streams)
        await hub.start()
        gateway = Gateway(settings, pool, session, sealer, hub, streams)
        try:
            async with sweeping_claims(gateway):
                yield {"gateway": gateway}
        finally:
            await stop_sweeper(sweeper)
            await streams.close()
            await hub.stop()
            await session.close()
            await pool.close()

    return Starlette(
        routes=routes,
        middleware=[
            Middleware(RawPathRouting),
            Middleware(PermissionMiddleware, routes=routes, tokens=tokens),
        ],
        exception_handlers={
            AppError: on_app_error,
            HTTPException: on_http_error,
            Replayed: on_replayed,
            Exception: on_unexpected,
        },
        lifespan=lifespan,
    )
