"""The façade's HTTP+JSON binding (SPEC §16): A2A 1.0's routes at ``/a2a/{agent_id}/…`` and
0.3's at ``/a2a/{agent_id}/v1/…``.

Each route reads its request into the JSON-RPC method name and params of its version and
runs the very method the JSON-RPC endpoint runs (same use cases, scoping, idempotency and
translation); the answer, the error and the stream frames are then written as the binding
carries them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.core.idempotency import REPLAYED, Replayed
from a2a_continue.errors import PayloadTooLarge
from a2a_continue.facade import http_errors, keys, rest03, rpc, streaming
from a2a_continue.facade import methods as m
from a2a_continue.facade.context import Call
from a2a_continue.facade.errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, RpcError
from a2a_continue.facade.handlers import public_base
from a2a_continue.http.handlers import agent_id_of, caller_of, gateway_of, read_body
from a2a_continue.limits import MAX_JSON_DEPTH, TooDeep, check_depth, nul_path

JSON = dict[str, Any]
Reader = Callable[[Request, JSON], JSON]  # (request, its JSON body) → the method's params
Shaper = Callable[[Any], Any]  # the method's result → the binding's answer body


@dataclass(frozen=True, slots=True)
class Binding:
    """How one route maps to a method: its name, how params are read, how answers look."""

    method: str
    read: Reader
    shape: Shaper | None = None  # None: the result as it is


# ---- reading requests ---------------------------------------------------------------------


def _decode(raw: bytes) -> JSON:
    if not raw.strip():
        return {}
    try:
        check_depth(raw)
    except TooDeep:
        raise RpcError(
            INVALID_REQUEST, f"the body nests deeper than {MAX_JSON_DEPTH} levels"
        ) from None
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise RpcError(PARSE_ERROR, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RpcError(INVALID_REQUEST, "the body must be a JSON object")
    where = nul_path(body, "$")
    if where is not None:
        raise RpcError(INVALID_PARAMS, f"{where} must not contain U+0000")
    return body


def _query_int(request: Request, *names: str) -> int | None:
    for name in names:
        raw = request.query_params.get(name)
        if raw is None:
            continue
        try:
            return int(raw)
        except ValueError:
            raise m.bad_params(f"$.query.{name}", "must be an integer") from None
    return None


def _query_bool(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if raw.lower() not in ("true", "false", "1", "0"):
        raise m.bad_params(f"$.query.{name}", "must be true or false")
    return raw.lower() in ("true", "1")


def _dropped(params: JSON) -> JSON:
    return {k: v for k, v in params.items() if v is not None}


def _task_id(request: Request) -> str:
    task_id: str = request.path_params["task_id"]
    return task_id


def _config_id(request: Request) -> str:
    config_id: str = request.path_params["config_id"]
    return config_id


def _send_10(request: Request, body: JSON) -> JSON:
    return {k: v for k, v in body.items() if k != "tenant"}


def _get_10(request: Request, body: JSON) -> JSON:
    return _dropped(
        {"id": _task_id(request), "historyLength": _query_int(request, "historyLength")}
    )


def _list_10(request: Request, body: JSON) -> JSON:
    q = request.query_params
    return _dropped(
        {
            "pageSize": _query_int(request, "pageSize"),
            "pageToken": q.get("pageToken"),
            "contextId": q.get("contextId"),
            "status": q.get("status"),
            "historyLength": _query_int(request, "historyLength"),
            "includeArtifacts": _query_bool(request, "includeArtifacts"),
            "statusTimestampAfter": q.get("statusTimestampAfter"),
        }
    )


def _task_10(request: Request, body: JSON) -> JSON:
    return _dropped({"id": _task_id(request), "metadata": body.get("metadata")})


def _push_create_10(request: Request, body: JSON) -> JSON:
    return {**_send_10(request, body), "taskId": _task_id(request)}


def _push_one_10(request: Request, body: JSON) -> JSON:
    return {"taskId": _task_id(request), "id": _config_id(request)}


def _push_list_10(request: Request, body: JSON) -> JSON:
    q = request.query_params
    return _dropped(
        {
            "taskId": _task_id(request),
            "pageSize": _query_int(request, "pageSize"),
            "pageToken": q.get("pageToken"),
        }
    )


def _nothing(request: Request, body: JSON) -> JSON:
    return {}


def _send_03(request: Request, body: JSON) -> JSON:
    params = rest03.send_params(body)
    message = params.get("message")
    if isinstance(message, dict) and not message.get("parts"):  # named as this binding names it
        raise m.bad_params("$.message.content", "is required (a non-empty list of parts)")
    return params


def _get_03(request: Request, body: JSON) -> JSON:
    length = _query_int(request, "historyLength", "history_length")
    return _dropped({"id": _task_id(request), "historyLength": length})


def _task_03(request: Request, body: JSON) -> JSON:
    return {"id": _task_id(request)}


def _push_set_03(request: Request, body: JSON) -> JSON:
    return {"taskId": _task_id(request), "pushNotificationConfig": rest03.push_config_in(body)}


def _push_one_03(request: Request, body: JSON) -> JSON:
    return {"id": _task_id(request), "pushNotificationConfigId": _config_id(request)}


# ---- answering ----------------------------------------------------------------------------


def _json(body: Any) -> Response:
    return Response(msgspec.json.encode(body), media_type="application/json")


def _envelope(version: str) -> streaming.Envelope:
    def result(frame: Any) -> ServerSentEvent:
        shaped = rest03.result_out(frame) if version == "0.3" else frame
        return ServerSentEvent(data=msgspec.json.encode(shaped).decode())

    def error(failure: JSON) -> ServerSentEvent:
        _, body = http_errors.error_body(failure, version)
        return ServerSentEvent(data=msgspec.json.encode(body).decode(), event="error")

    return streaming.Envelope(result, error)


async def _body_of(request: Request) -> JSON:
    if request.method in ("GET", "DELETE"):
        return {}
    try:
        raw = await read_body(request)
    except PayloadTooLarge as error:
        raise RpcError(
            INVALID_REQUEST, error.detail, type=error.slug, status=error.status
        ) from None
    return _decode(raw)


async def serve(request: Request, binding: Binding) -> Response:
    """Answer one HTTP+JSON request by running its method."""
    spec = rpc.METHODS[binding.method]
    version = spec.version
    try:
        rpc.asked_version(request)  # a version the client names must be one the gateway serves
        params = binding.read(request, await _body_of(request))
    except RpcError as error:
        return http_errors.error_response(error.render(version), version)
    call = Call(
        gw=gateway_of(request),
        caller=caller_of(request),
        agent_id=agent_id_of(request),
        version=version,
        method=binding.method,
        idempotency_key=keys.key_of(request.headers.get("Idempotency-Key"), params),
        base_url=public_base(request),
    )
    rpc.check_permission(call, spec)

    def refuse(error: JSON) -> Response:
        return http_errors.error_response(error, version)

    if spec.frames is not None:
        return await rpc.open_stream(call, spec, params, _envelope(version), refuse)
    assert spec.run is not None
    replayed = False
    try:
        try:
            result = await spec.run(call, params)
        except Replayed as replay:
            replayed = True
            kept = replay.response
            result = m.replayed(call, kept.status_code, bytes(kept.body))
        answer = _json(binding.shape(result) if binding.shape else result)
    except Exception as exc:
        answer = refuse(rpc.error_object(call, exc))
    if replayed:
        answer.headers[REPLAYED] = "true"
    return answer


def endpoint(binding: Binding, name: str, doc: str) -> Callable[[Request], Awaitable[Response]]:
    """The route handler of one binding (named for the API description)."""

    async def handler(request: Request) -> Response:
        return await serve(request, binding)

    handler.__name__ = handler.__qualname__ = name
    handler.__doc__ = doc
    return handler


# The routes: (HTTP method, path under the agent, binding, handler name, what it does).
V10: list[tuple[str, str, Binding, str, str]] = [
    ("POST", "/message:send", Binding("SendMessage", _send_10), "rest_send", "SendMessage."),
    (
        "POST",
        "/message:stream",
        Binding("SendStreamingMessage", _send_10),
        "rest_stream",
        "SendStreamingMessage, as server-sent events.",
    ),
    (
        "POST",
        "/tasks/{task_id}:cancel",
        Binding("CancelTask", _task_10),
        "rest_cancel",
        "CancelTask.",
    ),
    (
        "GET",
        "/tasks/{task_id}:subscribe",
        Binding("SubscribeToTask", _task_10),
        "rest_subscribe",
        "SubscribeToTask, as server-sent events.",
    ),
    (
        "POST",
        "/tasks/{task_id}:subscribe",
        Binding("SubscribeToTask", _task_10),
        "rest_subscribe_post",
        "SubscribeToTask, as server-sent events.",
    ),
    ("GET", "/tasks/{task_id}", Binding("GetTask", _get_10), "rest_get_task", "GetTask."),
    ("GET", "/tasks", Binding("ListTasks", _list_10), "rest_list_tasks", "ListTasks."),
    (
        "POST",
        "/tasks/{task_id}/pushNotificationConfigs",
        Binding("CreateTaskPushNotificationConfig", _push_create_10),
        "rest_create_push_config",
        "CreateTaskPushNotificationConfig.",
    ),
    (
        "GET",
        "/tasks/{task_id}/pushNotificationConfigs",
        Binding("ListTaskPushNotificationConfigs", _push_list_10),
        "rest_list_push_configs",
        "ListTaskPushNotificationConfigs.",
    ),
    (
        "GET",
        "/tasks/{task_id}/pushNotificationConfigs/{config_id}",
        Binding("GetTaskPushNotificationConfig", _push_one_10),
        "rest_get_push_config",
        "GetTaskPushNotificationConfig.",
    ),
    (
        "DELETE",
        "/tasks/{task_id}/pushNotificationConfigs/{config_id}",
        Binding("DeleteTaskPushNotificationConfig", _push_one_10),
        "rest_delete_push_config",
        "DeleteTaskPushNotificationConfig.",
    ),
    (
        "GET",
        "/extendedAgentCard",
        Binding("GetExtendedAgentCard", _nothing),
        "rest_extended_card",
        "GetExtendedAgentCard.",
    ),
]

V03: list[tuple[str, str, Binding, str, str]] = [
    (
        "POST",
        "/v1/message:send",
        Binding("message/send", _send_03, rest03.result_out),
        "rest03_send",
        "message/send.",
    ),
    (
        "POST",
        "/v1/message:stream",
        Binding("message/stream", _send_03),
        "rest03_stream",
        "message/stream, as server-sent events.",
    ),
    (
        "POST",
        "/v1/tasks/{task_id}:cancel",
        Binding("tasks/cancel", _task_03, rest03.task_out),
        "rest03_cancel",
        "tasks/cancel.",
    ),
    (
        "GET",
        "/v1/tasks/{task_id}:subscribe",
        Binding("tasks/resubscribe", _task_03),
        "rest03_subscribe",
        "tasks/resubscribe, as server-sent events.",
    ),
    (
        "POST",
        "/v1/tasks/{task_id}:subscribe",
        Binding("tasks/resubscribe", _task_03),
        "rest03_subscribe_post",
        "tasks/resubscribe, as server-sent events.",
    ),
    (
        "GET",
        "/v1/tasks/{task_id}",
        Binding("tasks/get", _get_03, rest03.task_out),
        "rest03_get_task",
        "tasks/get.",
    ),
    (
        "POST",
        "/v1/tasks/{task_id}/pushNotificationConfigs",
        Binding("tasks/pushNotificationConfig/set", _push_set_03),
        "rest03_set_push_config",
        "tasks/pushNotificationConfig/set.",
    ),
    (
        "GET",
        "/v1/tasks/{task_id}/pushNotificationConfigs",
        Binding("tasks/pushNotificationConfig/list", _task_03),
        "rest03_list_push_configs",
        "tasks/pushNotificationConfig/list.",
    ),
    (
        "GET",
        "/v1/tasks/{task_id}/pushNotificationConfigs/{config_id}",
        Binding("tasks/pushNotificationConfig/get", _push_one_03),
        "rest03_get_push_config",
        "tasks/pushNotificationConfig/get.",
    ),
    (
        "DELETE",
        "/v1/tasks/{task_id}/pushNotificationConfigs/{config_id}",
        Binding("tasks/pushNotificationConfig/delete", _push_one_03),
        "rest03_delete_push_config",
        "tasks/pushNotificationConfig/delete.",
    ),
    (
        "GET",
        "/v1/card",
        Binding("agent/getAuthenticatedExtendedCard", _nothing),
        "rest03_card",
        "agent/getAuthenticatedExtendedCard.",
    ),
]
