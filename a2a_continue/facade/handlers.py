"""The façade's HTTP endpoints: the agent card and the JSON-RPC endpoint of each agent."""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.auth import Caller
from a2a_continue.errors import PayloadTooLarge
from a2a_continue.facade import keys, rpc
from a2a_continue.facade.card import card_for
from a2a_continue.facade.errors import INVALID_REQUEST
from a2a_continue.facade.methods import Call
from a2a_continue.gateway import Gateway
from a2a_continue.handlers import json_response, read_body


def _gateway(request: Request) -> Gateway:
    gw: Gateway = request.state.gateway
    return gw


def _caller(request: Request) -> Caller:
    caller: Caller = request.state.caller
    return caller


def _agent_id(request: Request) -> uuid.UUID:
    agent_id: uuid.UUID = request.path_params["agent_id"]
    return agent_id


def public_base(request: Request) -> str:
    """The gateway's base URL as clients reach it: A2AC_PUBLIC_URL, else the request's."""
    configured = _gateway(request).settings.public_url
    return configured.rstrip("/") if configured else str(request.base_url).rstrip("/")


async def agent_card(request: Request) -> Response:
    """Serve the agent's card, pointed at the gateway."""
    async with _gateway(request).connection() as conn:
        card = await card_for(conn, _caller(request), _agent_id(request), public_base(request))
    return json_response(card)


def idempotency_key(request: Request, parsed: rpc.RpcRequest) -> str | None:
    """The key a retried send is known by: the Idempotency-Key header, else the messageId."""
    return keys.key_of(request.headers.get("Idempotency-Key"), parsed.params)


async def agent_rpc(request: Request) -> Response:
    """Answer one JSON-RPC request to the agent as the agent would, through the gateway."""
    try:
        raw = await read_body(request)
    except PayloadTooLarge as error:
        refusal = rpc.Unreadable(
            INVALID_REQUEST, error.detail, None, type=error.slug, status=error.status
        )
        return rpc.refuse(request, refusal)
    try:
        parsed = rpc.parse_request(raw)
        spec = rpc.resolve(request, parsed)
    except rpc.Unreadable as error:
        return rpc.refuse(request, error)
    call = Call(
        gw=_gateway(request),
        caller=_caller(request),
        agent_id=_agent_id(request),
        version=spec.version,
        method=parsed.method,
        idempotency_key=idempotency_key(request, parsed),
    )
    rpc.check_permission(call, spec)
    return await rpc.dispatch(call, spec, parsed)
