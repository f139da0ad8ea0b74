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

from a2a_continue.a2a import protojson
from a2a_continue.core.idempotency.retries import REPLAYED, Replayed
from a2a_continue.errors import PayloadTooLarge
from a2a_continue.facade import http_errors, keys, rest03, rpc, streaming
from a2a_continue.facade import http_requests as rq
from a2a_continue.facade import methods as m
from a2a_continue.facade.context import Call
from a2a_continue.facade.errors import INVALID_REQUEST, RpcError
from a2a_continue.facade.handlers import public_base
from a2a_continue.http.handlers import agent_id_of, caller_of, gateway_of, read_body

JSON = dict[str, Any]
Reader = Callable[[Request, JSON], JSON]  # (request, its JSON body) → the method's params
Shaper = Callable[[Any], Any]  # the method's result → the binding's answer body


@dataclass(frozen=True, slots=True)
class Binding:
    """How one route maps to a method: its name, how params are read, how answers look."""

    method: str
    read: Reader
    shape: Shaper | None = None  # None: the result as it is


# ---- answering ----------------------------------------------------------------------------


def _object(result: Any) -> Any:
    """A method that answers nothing (a delete) answers ``{}`` over HTTP+JSON."""
    return {} if result is None else result


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
    return rq.decode(raw)


async def serve(request: Request, binding: Binding) -> Response:
    """Answer one HTTP+JSON request by running its method."""
    spec = rpc.METHODS[binding.method]
    version = spec.version
    try:
        rpc.asked_version(request)  # a version the client names must be one the gateway serves
        body = await _body_of(request)
        if version == "1.0":  # ProtoJSON: fields read under either name (0.3: by rest03)
            body = rq.named_10(binding.method, body)
        params = binding.read(request, body)
    except protojson.BothNames as both:
        return http_errors.error_response(m.bad_params(both.loc, both.msg).render(version), version)
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
    ("POST", "/message:send", Binding("SendMessage", rq.send_10), "rest_send", "SendMessage."),
    (
        "POST",
        "/message:stream",
        Binding("SendStreamingMessage", rq.send_10),
        "rest_stream",
        "SendStreamingMessage, as server-sent events.",
    ),
    (
        "POST",
        "/tasks/{task_id}:cancel",
        Binding("CancelTask", rq.task_10),
        "rest_cancel",
        "CancelTask.",
    ),
    (
        "GET",
        "/tasks/{task_id}:subscribe",
        Binding("SubscribeToTask", rq.task_10),
        "rest_subscribe",
        "SubscribeToTask, as server-sent events.",
    ),
    (
        "POST",
        "/tasks/{task_id}:subscribe",
        Binding("SubscribeToTask", rq.task_10),
        "rest_subscribe_post",
        "SubscribeToTask, as server-sent events.",
    ),
    ("GET", "/tasks/{task_id}", Binding("GetTask", rq.get_10), "rest_get_task", "GetTask."),
    ("GET", "/tasks", Binding("ListTasks", rq.list_10), "rest_list_tasks", "ListTasks."),
    (
        "POST",
        "/tasks/{task_id}/pushNotificationConfigs",
        Binding("CreateTaskPushNotificationConfig", rq.push_create_10),
        "rest_create_push_config",
        "CreateTaskPushNotificationConfig.",
    ),
    (
        "GET",
        "/tasks/{task_id}/pushNotificationConfigs",
        Binding("ListTaskPushNotificationConfigs", rq.push_list_10),
        "rest_list_push_configs",
        "ListTaskPushNotificationConfigs.",
    ),
    (
        "GET",
        "/tasks/{task_id}/pushNotificationConfigs/{config_id}",
        Binding("GetTaskPushNotificationConfig", rq.push_one_10),
        "rest_get_push_config",
        "GetTaskPushNotificationConfig.",
    ),
    (
        "DELETE",
        "/tasks/{task_id}/pushNotificationConfigs/{config_id}",
        Binding("DeleteTaskPushNotificationConfig", rq.push_one_10, _object),
        "rest_delete_push_config",
        "DeleteTaskPushNotificationConfig.",
    ),
    (
        "GET",
        "/extendedAgentCard",
        Binding("GetExtendedAgentCard", rq.nothing),
        "rest_extended_card",
        "GetExtendedAgentCard.",
    ),
]

V03: list[tuple[str, str, Binding, str, str]] = [
    (
        "POST",
        "/v1/message:send",
        Binding("message/send", rq.send_03, rest03.result_out),
        "rest03_send",
        "message/send.",
    ),
    (
        "POST",
        "/v1/message:stream",
        Binding("message/stream", rq.send_03),
        "rest03_stream",
        "message/stream, as server-sent events.",
    ),
    (
        "POST",
        "/v1/tasks/{task_id}:cancel",
        Binding("tasks/cancel", rq.task_03, rest03.task_out),
        "rest03_cancel",
        "tasks/cancel.",
    ),
    (
        "GET",
        "/v1/tasks/{task_id}:subscribe",
        Binding("tasks/resubscribe", rq.task_03),
        "rest03_subscribe",
        "tasks/resubscribe, as server-sent events.",
    ),
    (
        "POST",
        "/v1/tasks/{task_id}:subscribe",
        Binding("tasks/resubscribe", rq.task_03),
        "rest03_subscribe_post",
        "tasks/resubscribe, as server-sent events.",
    ),
    (
        "GET",
        "/v1/tasks/{task_id}",
        Binding("tasks/get", rq.get_03, rest03.task_out),
        "rest03_get_task",
        "tasks/get.",
    ),
    (
        "POST",
        "/v1/tasks/{task_id}/pushNotificationConfigs",
        Binding("tasks/pushNotificationConfig/set", rq.push_set_03, rest03.push_config_out),
        "rest03_set_push_config",
        "tasks/pushNotificationConfig/set.",
    ),
    (
        "GET",
        "/v1/tasks/{task_id}/pushNotificationConfigs",
        Binding("tasks/pushNotificationConfig/list", rq.task_03, rest03.push_configs_out),
        "rest03_list_push_configs",
        "tasks/pushNotificationConfig/list.",
    ),
    (
        "GET",
        "/v1/tasks/{task_id}/pushNotificationConfigs/{config_id}",
        Binding("tasks/pushNotificationConfig/get", rq.push_one_03, rest03.push_config_out),
        "rest03_get_push_config",
        "tasks/pushNotificationConfig/get.",
    ),
    (
        "DELETE",
        "/v1/tasks/{task_id}/pushNotificationConfigs/{config_id}",
        Binding("tasks/pushNotificationConfig/delete", rq.push_one_03, _object),
        "rest03_delete_push_config",
        "tasks/pushNotificationConfig/delete.",
    ),
    (
        "GET",
        "/v1/card",
        Binding("agent/getAuthenticatedExtendedCard", rq.nothing),
        "rest03_card",
        "agent/getAuthenticatedExtendedCard.",
    ),
]
