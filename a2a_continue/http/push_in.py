"""``POST /v1/a2a/push-in/{config_id}`` (SPEC §19): an agent pushes a change of a task the
gateway follows. No caller JWT: the push authenticates by its config's token."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.core.watch.push_in import receive_push
from a2a_continue.errors import AppError
from a2a_continue.http.handlers import gateway_of, read_body
from a2a_continue.obs import metrics
from a2a_continue.settings import Settings

# A body past the limit is read on and dropped up to this many times the limit, so that the
# agent receives the 413 rather than a reset connection; past that the answer goes at once.
DISCARD_FACTOR = 4
_OUTCOMES = {401: "unauthorized", 404: "not-found", 413: "too-large", 422: "invalid"}


def token_of(request: Request) -> str | None:
    """The push's token: ``X-A2A-Notification-Token``, else ``Authorization: Bearer``."""
    token = request.headers.get("x-a2a-notification-token")
    if token:
        return token
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


async def read_push(request: Request, settings: Settings) -> bytes:
    """Read a push's body within ``A2AC_MAX_AGENT_RESPONSE_BYTES``; a larger one is drained
    (up to a bound) and refused with 413."""
    limit = settings.max_agent_response_bytes
    return await read_body(request, limit, drain_to=limit * DISCARD_FACTOR)


async def push_in(request: Request) -> Response:
    """Record what the agent pushed; 204, or 401, 404, 413, 422 (503 without the database)."""
    gw = gateway_of(request)
    try:
        body = await read_push(request, gw.settings)
        outcome = await receive_push(gw, request.path_params["config_id"], token_of(request), body)
    except AppError as error:
        metrics.push_in(_OUTCOMES.get(error.status, "unavailable"))
        raise
    metrics.push_in(outcome)
    return Response(status_code=204)
