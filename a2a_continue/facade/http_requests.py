"""Requests of the façade's HTTP+JSON binding read into the JSON-RPC params of their method:
the path's ids, the query's typed values, the body (1.0: the params themselves; 0.3: the
protobuf JSON, read by ``rest03``). Both are ProtoJSON: a field's proto name is read as its
JSON name, in the body and the query alike."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request

from a2a_continue.a2a import protojson
from a2a_continue.facade import methods as m
from a2a_continue.facade import rest03
from a2a_continue.facade.errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, RpcError
from a2a_continue.limits import MAX_JSON_DEPTH, TooDeep, check_depth, nul_path

JSON = dict[str, Any]


def decode(raw: bytes) -> JSON:
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


def named_10(method: str, body: JSON) -> JSON:
    """A 1.0 body with each field under its JSON name (SPEC §21): either name is read, both
    raise protojson.BothNames."""
    named: JSON = protojson.json_names(body, protojson.REQUESTS[method], "$.params")
    return named


def query_10(request: Request, message: str) -> dict[str, str]:
    """A 1.0 query's parameters under their JSON names (``history_length`` read too)."""
    named: dict[str, str] = protojson.json_names(dict(request.query_params), message, "$.query")
    return named


def query_03(request: Request) -> dict[str, str]:
    """A 0.3 query's parameters in camelCase (``history_length`` read too)."""
    named: dict[str, str] = rest03.camel_keys(dict(request.query_params), "$.query")
    return named


def query_int(query: dict[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise m.bad_params(f"$.query.{name}", "must be an integer") from None


def query_bool(query: dict[str, str], name: str) -> bool | None:
    raw = query.get(name)
    if raw is None:
        return None
    if raw.lower() not in ("true", "false", "1", "0"):
        raise m.bad_params(f"$.query.{name}", "must be true or false")
    return raw.lower() in ("true", "1")


def dropped(params: JSON) -> JSON:
    return {k: v for k, v in params.items() if v is not None}


def task_id(request: Request) -> str:
    task_id: str = request.path_params["task_id"]
    return task_id


def config_id(request: Request) -> str:
    config_id: str = request.path_params["config_id"]
    return config_id


def send_10(request: Request, body: JSON) -> JSON:
    return {k: v for k, v in body.items() if k != "tenant"}


def get_10(request: Request, body: JSON) -> JSON:
    q = query_10(request, "GetTaskRequest")
    return dropped({"id": task_id(request), "historyLength": query_int(q, "historyLength")})


def list_10(request: Request, body: JSON) -> JSON:
    q = query_10(request, "ListTasksRequest")
    return dropped(
        {
            "pageSize": query_int(q, "pageSize"),
            "pageToken": q.get("pageToken"),
            "contextId": q.get("contextId"),
            "status": q.get("status"),
            "historyLength": query_int(q, "historyLength"),
            "includeArtifacts": query_bool(q, "includeArtifacts"),
            "statusTimestampAfter": q.get("statusTimestampAfter"),
        }
    )


def task_10(request: Request, body: JSON) -> JSON:
    return dropped({"id": task_id(request), "metadata": body.get("metadata")})


def push_create_10(request: Request, body: JSON) -> JSON:
    return {**send_10(request, body), "taskId": task_id(request)}


def push_one_10(request: Request, body: JSON) -> JSON:
    return {"taskId": task_id(request), "id": config_id(request)}


def push_list_10(request: Request, body: JSON) -> JSON:
    q = query_10(request, "ListTaskPushNotificationConfigsRequest")
    return dropped(
        {
            "taskId": task_id(request),
            "pageSize": query_int(q, "pageSize"),
            "pageToken": q.get("pageToken"),
        }
    )


def nothing(request: Request, body: JSON) -> JSON:
    return {}


def send_03(request: Request, body: JSON) -> JSON:
    params = rest03.send_params(body)
    message = params.get("message")
    if isinstance(message, dict) and not message.get("parts"):  # named as this binding names it
        raise m.bad_params("$.message.content", "is required (a non-empty list of parts)")
    return params


def get_03(request: Request, body: JSON) -> JSON:
    length = query_int(query_03(request), "historyLength")
    return dropped({"id": task_id(request), "historyLength": length})


def task_03(request: Request, body: JSON) -> JSON:
    return {"id": task_id(request)}


def push_set_03(request: Request, body: JSON) -> JSON:
    return {"taskId": task_id(request), "pushNotificationConfig": rest03.push_config_in(body)}


def push_one_03(request: Request, body: JSON) -> JSON:
    return {"id": task_id(request), "pushNotificationConfigId": config_id(request)}
