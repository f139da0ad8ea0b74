"""JSON-RPC 2.0 at the gateway: parse a request, pick the method, answer in the client's version."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.a2a import protojson
from a2a_continue.a2a.protocol import INTERRUPTED_STATES, TERMINAL_STATES
from a2a_continue.core.idempotency.retries import REPLAYED, Replayed
from a2a_continue.errors import AppError, Forbidden
from a2a_continue.facade import methods as m
from a2a_continue.facade import push, streaming
from a2a_continue.facade.context import Call
from a2a_continue.facade.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    VERSION_NOT_SUPPORTED,
    RpcError,
    from_app_error,
)
from a2a_continue.facade.extended import extended_card
from a2a_continue.limits import MAX_JSON_DEPTH, TooDeep, check_depth, nul_path
from a2a_continue.runtime.db import as_unavailable

log = logging.getLogger(__name__)

JSON_TYPE = "application/json"
VERSION_HEADER = "A2A-Version"
DEFAULT_VERSION = "0.3"  # what the A2A spec says a request without A2A-Version speaks
READ, INVOKE = "a2a.read", "a2a.invoke"


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One JSON-RPC method: the version its name belongs to, its permission, its code."""

    version: str
    permission: str
    run: m.Method | None = None
    frames: m.StreamMethod | None = None
    # A stream's `final` (0.3) marks the status in one of these states.
    final_states: frozenset[str] = frozenset()


# The push-config methods of each version: (name, permission, method).
_PUSH_METHODS = {
    "1.0": (
        ("CreateTaskPushNotificationConfig", INVOKE, push.create),
        ("GetTaskPushNotificationConfig", READ, push.get),
        ("ListTaskPushNotificationConfigs", READ, push.list_),
        ("DeleteTaskPushNotificationConfig", INVOKE, push.delete),
    ),
    "0.3": (
        ("tasks/pushNotificationConfig/set", INVOKE, push.create),
        ("tasks/pushNotificationConfig/get", READ, push.get),
        ("tasks/pushNotificationConfig/list", READ, push.list_),
        ("tasks/pushNotificationConfig/delete", INVOKE, push.delete),
    ),
}

SETTLED = TERMINAL_STATES | INTERRUPTED_STATES

METHODS: dict[str, MethodSpec] = {
    "SendMessage": MethodSpec("1.0", INVOKE, run=m.send),
    "message/send": MethodSpec("0.3", INVOKE, run=m.send),
    "SendStreamingMessage": MethodSpec(
        "1.0", INVOKE, frames=streaming.send_frames, final_states=SETTLED
    ),
    "message/stream": MethodSpec("0.3", INVOKE, frames=streaming.send_frames, final_states=SETTLED),
    "SubscribeToTask": MethodSpec(
        "1.0", READ, frames=streaming.subscribe_frames, final_states=TERMINAL_STATES
    ),
    "tasks/resubscribe": MethodSpec(
        "0.3", READ, frames=streaming.subscribe_frames, final_states=TERMINAL_STATES
    ),
    "GetTask": MethodSpec("1.0", READ, run=m.get),
    "tasks/get": MethodSpec("0.3", READ, run=m.get),
    "ListTasks": MethodSpec("1.0", READ, run=m.list_),
    "CancelTask": MethodSpec("1.0", INVOKE, run=m.cancel),
    "GetExtendedAgentCard": MethodSpec("1.0", READ, run=extended_card),
    "agent/getAuthenticatedExtendedCard": MethodSpec("0.3", READ, run=extended_card),
    "tasks/cancel": MethodSpec("0.3", INVOKE, run=m.cancel),
    **{
        name: MethodSpec(version, permission, run=run)
        for version, methods in _PUSH_METHODS.items()
        for name, permission, run in methods
    },
}


class Unreadable(RpcError):
    """A request the façade cannot dispatch, with the id it could read (or None), and the
    version its method speaks once that is known."""

    def __init__(
        self,
        code: int,
        message: str,
        rpc_id: Any = None,
        *,
        version: str | None = None,
        **members: Any,
    ) -> None:
        super().__init__(code, message, **members)
        self.rpc_id = rpc_id
        self.version = version


class RpcRequest(msgspec.Struct, frozen=True):
    """The parts of a JSON-RPC request the façade reads."""

    rpc_id: Any
    method: str
    params: dict[str, Any]


def asked_version(request: Request) -> str | None:
    """Read the protocol version the client names (header, else query); None when absent."""
    raw = request.headers.get(VERSION_HEADER) or request.query_params.get(VERSION_HEADER)
    if raw is None or not raw.strip():
        return None
    major, _, rest = raw.strip().partition(".")
    minor = rest.partition(".")[0] or "0"
    version = f"{major}.{minor}"
    if version not in ("1.0", "0.3"):
        raise RpcError(
            VERSION_NOT_SUPPORTED,
            f"A2A version {raw.strip()!r} is not supported; use 1.0 or 0.3",
            supported=["1.0", "0.3"],
        )
    return version


def parse_request(raw: bytes) -> RpcRequest:
    """Decode one JSON-RPC request; raise the JSON-RPC error that says what is wrong."""
    try:
        check_depth(raw)
    except TooDeep:
        message = f"the body nests deeper than {MAX_JSON_DEPTH} levels"
        raise Unreadable(INVALID_REQUEST, message) from None
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise Unreadable(PARSE_ERROR, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise Unreadable(INVALID_REQUEST, "the body must be one JSON-RPC request object")
    rpc_id = body.get("id")
    if isinstance(rpc_id, bool) or not isinstance(rpc_id, str | int | float | None):
        raise Unreadable(INVALID_REQUEST, "'id' must be a string, a number or null")
    if body.get("jsonrpc") != "2.0":
        raise Unreadable(INVALID_REQUEST, "'jsonrpc' must be \"2.0\"", rpc_id=rpc_id)
    method = body.get("method")
    if not isinstance(method, str):
        raise Unreadable(INVALID_REQUEST, "'method' must be a string", rpc_id=rpc_id)
    params = body.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise Unreadable(INVALID_PARAMS, "'params' must be an object", rpc_id=rpc_id)
    where = nul_path(params, "$.params")
    if where is not None:
        raise Unreadable(INVALID_PARAMS, f"{where} must not contain U+0000", rpc_id=rpc_id)
    return RpcRequest(rpc_id, method, params)


def in_json_names(parsed: RpcRequest) -> RpcRequest:
    """A 1.0 request with its params' fields under their JSON names, either name read."""
    message = protojson.REQUESTS.get(parsed.method)
    if message is None:
        return parsed  # a 0.3 method: plain JSON in camelCase
    try:
        params = protojson.json_names(parsed.params, message, "$.params")
    except protojson.BothNames as both:
        where = [{"loc": both.loc, "msg": both.msg}]
        raise Unreadable(
            INVALID_PARAMS, str(both), parsed.rpc_id, version="1.0", errors=where
        ) from None
    return RpcRequest(parsed.rpc_id, parsed.method, params)


def rpc_response(rpc_id: Any, *, result: Any = None, error: Any = None) -> Response:
    """A JSON-RPC answer, always HTTP 200, carrying the client's id exactly."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id}
    if error is not None:
        body["error"] = error
    else:
        body["result"] = result
    return Response(msgspec.json.encode(body), media_type=JSON_TYPE)


def resolve(request: Request, parsed: RpcRequest) -> MethodSpec:
    """Find the method; its name tells the version the client speaks.

    Every method name belongs to one version, so the name decides (a 1.0 client that
    leaves out A2A-Version is still understood); a version the client names must be one
    the gateway serves.
    """
    try:
        asked_version(request)
    except RpcError as error:
        raise Unreadable(error.code, error.message, parsed.rpc_id, **error.members) from None
    spec = METHODS.get(parsed.method)
    if spec is None:
        raise Unreadable(
            METHOD_NOT_FOUND, f"method {parsed.method!r} is not served here", parsed.rpc_id
        )
    return spec


def error_object(call: Call, exc: Exception) -> dict[str, Any]:
    """The JSON-RPC ``error`` a method's exception stands for, in the client's version."""
    exc = as_unavailable(exc) or exc
    if isinstance(exc, RpcError):
        return exc.render(call.version)
    if isinstance(exc, m.AgentRpcError):
        return exc.error
    if isinstance(exc, AppError):
        return from_app_error(exc, call.method, call.version).render(call.version)
    log.error("unexpected error in %s on agent %s", call.method, call.agent_id, exc_info=exc)
    bug = RpcError(INTERNAL_ERROR, "an unexpected error occurred; it has been logged")
    return bug.render(call.version)


def _failure(call: Call, parsed: RpcRequest, exc: Exception) -> Response:
    return rpc_response(parsed.rpc_id, error=error_object(call, exc))


async def dispatch(call: Call, spec: MethodSpec, parsed: RpcRequest) -> Response:
    """Run the method; every refusal becomes a JSON-RPC error in the client's version."""
    if spec.frames is not None:
        return await _open_stream(call, spec, parsed)
    assert spec.run is not None
    try:
        result = await spec.run(call, parsed.params)
    except Replayed as replay:
        return _replay(call, parsed, replay.response)
    except Exception as exc:
        return _failure(call, parsed, exc)
    return rpc_response(parsed.rpc_id, result=result)


def _replay(call: Call, parsed: RpcRequest, kept: Response) -> Response:
    """Answer a retried send or cancel with its kept answer, marked as a replay."""
    try:
        answer = rpc_response(
            parsed.rpc_id, result=m.replayed(call, kept.status_code, bytes(kept.body))
        )
    except Exception as exc:
        answer = _failure(call, parsed, exc)
    answer.headers[REPLAYED] = "true"
    return answer


async def _open_stream(call: Call, spec: MethodSpec, parsed: RpcRequest) -> Response:
    def refuse(error: dict[str, Any]) -> Response:
        return rpc_response(parsed.rpc_id, error=error)

    return await open_stream(
        call, spec, parsed.params, streaming.rpc_envelope(parsed.rpc_id), refuse
    )


async def open_stream(
    call: Call,
    spec: MethodSpec,
    params: dict[str, Any],
    envelope: streaming.Envelope,
    refuse: Callable[[dict[str, Any]], Response],
) -> Response:
    """Answer a stream once its first frame is there; a refusal before it is ``refuse``d."""
    assert spec.frames is not None
    try:
        opened = call.gw.open_streams.take()
    except AppError as exc:
        return refuse(error_object(call, exc))
    frames = spec.frames(call, params)
    try:
        first = await anext(frames)
    except StopAsyncIteration:
        first = streaming.ErrorFrame(
            RpcError(INTERNAL_ERROR, "the stream ended before its first frame").render(call.version)
        )
    except Exception as exc:
        opened.release()
        await frames.aclose()
        return refuse(error_object(call, exc))
    if isinstance(first, streaming.ErrorFrame):
        opened.release()
        await frames.aclose()
        return refuse(first.error)
    return streaming.stream_response(call, envelope, spec.final_states, first, frames, opened)


def check_permission(call: Call, spec: MethodSpec) -> None:
    """The method's permission, checked once the method is known (HTTP 403 otherwise)."""
    if not call.caller.may(spec.permission):
        raise Forbidden(f"the A2A method {call.method!r} needs the {spec.permission!r} permission")


def fallback_version(request: Request) -> str:
    """The version to answer in before the method is known."""
    try:
        return asked_version(request) or DEFAULT_VERSION
    except RpcError:
        return "1.0"


def refuse(request: Request, error: RpcError) -> Response:
    """Answer a request the façade could not dispatch."""
    if not isinstance(error, Unreadable):
        return rpc_response(None, error=error.render(fallback_version(request)))
    version = error.version or fallback_version(request)
    return rpc_response(error.rpc_id, error=error.render(version))
