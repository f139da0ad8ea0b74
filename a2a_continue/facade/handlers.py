"""The façade's HTTP endpoints: the agent card and the JSON-RPC endpoint of each agent."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.errors import PayloadTooLarge
from a2a_continue.facade import keys, rpc
from a2a_continue.facade.card import card_for
from a2a_continue.facade.context import Call
from a2a_continue.facade.errors import INVALID_REQUEST, RpcError
from a2a_continue.facade.signed_card import signed
from a2a_continue.http.handlers import agent_id_of, caller_of, gateway_of, json_response, read_body


def public_base(request: Request) -> str:
    """The gateway's base URL as clients reach it: A2AC_PUBLIC_URL, else the request's."""
    configured = gateway_of(request).settings.public_url
    return configured.rstrip("/") if configured else str(request.base_url).rstrip("/")


def card_version(request: Request) -> str | None:
    """The version whose card the client asks for (A2A-Version); None: the card both read."""
    try:
        return rpc.asked_version(request)
    except RpcError:
        return None


async def agent_card(request: Request) -> Response:
    """Serve the agent's card, pointed at the gateway and signed by it (a public agent's
    needs no token)."""
    base, version = public_base(request), card_version(request)
    gw = gateway_of(request)
    async with gw.connection() as conn:
        card = await card_for(conn, caller_of(request), agent_id_of(request), base, version)
    return json_response(await signed(gw, card, base))


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
        parsed = rpc.in_json_names(parsed)
    except rpc.Unreadable as error:
        return rpc.refuse(request, error)
    call = Call(
        gw=gateway_of(request),
        caller=caller_of(request),
        agent_id=agent_id_of(request),
        version=spec.version,
        method=parsed.method,
        idempotency_key=idempotency_key(request, parsed),
        base_url=public_base(request),
    )
    rpc.check_permission(call, spec)
    return await rpc.dispatch(call, spec, parsed)
