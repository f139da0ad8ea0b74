"""Errors of the façade's HTTP+JSON binding: the JSON-RPC error a method ends with, as the
binding carries it, with the HTTP status A2A maps its code to.

1.0: a ``google.rpc.Status`` JSON (``{"error": {code, status, message, details}}``) whose
details hold one ``google.rpc.ErrorInfo`` (the A2A reason, and the members as metadata).
0.3: ``{"code", "type", "message", "data"}``: the JSON-RPC code and data, and the A2A error's
name, which 0.3 clients read to raise the matching error.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response

from a2a_continue.facade.errors import (
    DOMAIN,
    ERROR_INFO,
    INTERNAL_ERROR,
    REASONS,
    error_data,
    members_of,
)

JSON = dict[str, Any]

# JSON-RPC code → (HTTP status, google.rpc code name), as A2A maps them.
STATUSES: dict[int, tuple[int, str]] = {
    -32700: (400, "INVALID_ARGUMENT"),
    -32600: (400, "INVALID_ARGUMENT"),
    -32601: (404, "NOT_FOUND"),
    -32602: (400, "INVALID_ARGUMENT"),
    -32603: (500, "INTERNAL"),
    -32001: (404, "NOT_FOUND"),
    -32002: (400, "FAILED_PRECONDITION"),
    -32003: (400, "FAILED_PRECONDITION"),
    -32004: (400, "FAILED_PRECONDITION"),
    -32005: (400, "INVALID_ARGUMENT"),
    -32006: (500, "INTERNAL"),
    -32007: (400, "FAILED_PRECONDITION"),
    -32008: (400, "FAILED_PRECONDITION"),
    -32009: (400, "FAILED_PRECONDITION"),
}
# The gateway's own statuses an internal error may carry (a busy task, an agent that cannot
# be reached or answers late, a database that does not answer, a body too large).
_OWN_STATUSES = {
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# The 0.3 name of each A2A error (what 0.3 clients map an error body's `type` to).
NAMES_03 = {
    -32700: "JSONParseError",
    -32600: "InvalidRequestError",
    -32601: "MethodNotFoundError",
    -32602: "InvalidParamsError",
    -32603: "InternalError",
    -32001: "TaskNotFoundError",
    -32002: "TaskNotCancelableError",
    -32003: "PushNotificationNotSupportedError",
    -32004: "UnsupportedOperationError",
    -32005: "ContentTypeNotSupportedError",
    -32006: "InvalidAgentResponseError",
    -32007: "AuthenticatedExtendedCardNotConfiguredError",
}


def _own_status(members: JSON) -> int | None:
    raw = members.get("status")
    try:
        status = int(raw) if isinstance(raw, int | str) else None
    except ValueError:
        return None
    return status if status in _OWN_STATUSES else None


def http_status(code: int, members: JSON) -> tuple[int, str]:
    """The HTTP status and google.rpc code name of a JSON-RPC error."""
    own = _own_status(members) if code in (INTERNAL_ERROR, -32600) else None
    if own is not None:
        return own, _OWN_STATUSES[own]
    return STATUSES.get(code, (500, "INTERNAL"))


def error_body(error: JSON, version: str) -> tuple[int, JSON]:
    """A JSON-RPC ``error`` object (either version's shape) as the binding's error body."""
    raw_code = error.get("code")
    code = raw_code if isinstance(raw_code, int) else INTERNAL_ERROR
    message = str(error.get("message", ""))
    members = members_of(error.get("data"))
    status, name = http_status(code, members)
    if version == "0.3":
        body: JSON = {"code": code, "type": NAMES_03.get(code, "InternalError"), "message": message}
        if members:
            body["data"] = members
        return status, body
    details = error_data(code, members, "1.0") if members else []
    if not details:
        reason = REASONS.get(code, "UNKNOWN_ERROR")
        details = [{"@type": ERROR_INFO, "reason": reason, "domain": DOMAIN, "metadata": {}}]
    return status, {
        "error": {"code": status, "status": name, "message": message, "details": details}
    }


def error_response(error: JSON, version: str) -> Response:
    """The binding's answer to a request that ends with ``error``."""
    status, body = error_body(error, version)
    return Response(msgspec.json.encode(body), status_code=status, media_type="application/json")
