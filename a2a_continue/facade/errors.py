"""JSON-RPC errors of the façade: the gateway's refusals in the client's protocol version."""

from __future__ import annotations

from typing import Any

import msgspec

from a2a_continue.core.idempotency.retries import InvalidKey, KeyReused, KeyStreamed
from a2a_continue.errors import (
    AppError,
    BadRequest,
    Invalid,
    NotCancelable,
    NotFound,
    PayloadTooLarge,
    TaskTerminal,
)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
VERSION_NOT_SUPPORTED = -32009

# The ErrorInfo `reason` of each code (1.0 clients read it; the names are the A2A spec's).
REASONS = {
    PARSE_ERROR: "JSON_PARSE_ERROR",
    INVALID_REQUEST: "INVALID_REQUEST",
    METHOD_NOT_FOUND: "METHOD_NOT_FOUND",
    INVALID_PARAMS: "INVALID_PARAMS",
    INTERNAL_ERROR: "INTERNAL_ERROR",
    TASK_NOT_FOUND: "TASK_NOT_FOUND",
    TASK_NOT_CANCELABLE: "TASK_NOT_CANCELABLE",
    PUSH_NOT_SUPPORTED: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    -32005: "CONTENT_TYPE_NOT_SUPPORTED",
    -32006: "INVALID_AGENT_RESPONSE",
    -32007: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    -32008: "EXTENSION_SUPPORT_REQUIRED",
    VERSION_NOT_SUPPORTED: "VERSION_NOT_SUPPORTED",
}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
DOMAIN = "a2a-protocol.org"

CANCEL_METHODS = frozenset({"CancelTask", "tasks/cancel"})


class RpcError(Exception):
    """A JSON-RPC error: a code, a message and the members its ``data`` carries."""

    def __init__(self, code: int, message: str, **members: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.members = members

    def render(self, version: str) -> dict[str, Any]:
        """Return the JSON-RPC ``error`` object in ``version``'s shape."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.members:
            error["data"] = error_data(self.code, self.members, version)
        return error


def error_data(code: int, members: dict[str, Any], version: str) -> Any:
    """0.3: an object holding the members; 1.0: a list of one ``google.rpc.ErrorInfo``."""
    if version == "0.3":
        return members
    # ErrorInfo.metadata is a map of strings.
    metadata = {
        key: value if isinstance(value, str) else msgspec.json.encode(value).decode()
        for key, value in members.items()
    }
    reason = REASONS.get(code, "UNKNOWN_ERROR")
    return [{"@type": ERROR_INFO, "reason": reason, "domain": DOMAIN, "metadata": metadata}]


def members_of(data: object) -> dict[str, Any]:
    """Read the members of an error's ``data`` in either version's shape."""
    if isinstance(data, dict):
        return data
    if isinstance(data, list):
        for entry in data:
            if isinstance(entry, dict) and isinstance(entry.get("metadata"), dict):
                return dict(entry["metadata"])
    return {}


def from_app_error(error: AppError, method: str, version: str) -> RpcError:
    """Turn one of the gateway's refusals into the JSON-RPC error of SPEC §9."""
    members: dict[str, Any] = {"type": error.slug, "status": error.status}
    if isinstance(error, TaskTerminal):
        members["state"] = error.extra["state"]
        if method in CANCEL_METHODS:
            return RpcError(TASK_NOT_CANCELABLE, error.detail, **members)
        code = UNSUPPORTED_OPERATION if version == "1.0" else INVALID_PARAMS
        return RpcError(code, error.detail, **members)
    if isinstance(error, NotCancelable):
        return RpcError(TASK_NOT_CANCELABLE, error.detail, **members)
    if isinstance(error, NotFound):
        return RpcError(TASK_NOT_FOUND, error.detail, **members)
    if isinstance(error, KeyReused | InvalidKey):
        return RpcError(INVALID_PARAMS, error.detail, **members)
    if isinstance(error, KeyStreamed):  # where the streamed answer can be read: its events
        return RpcError(INTERNAL_ERROR, error.detail, **members, **error.extra)
    if isinstance(error, Invalid):
        return RpcError(INVALID_PARAMS, error.detail, errors=error.extra["errors"], **members)
    if isinstance(error, BadRequest):
        return RpcError(INVALID_PARAMS, error.detail, **members)
    if isinstance(error, PayloadTooLarge):
        return RpcError(INVALID_REQUEST, error.detail, **members)
    # TaskBusy, 502, 503, 504: the request may succeed later; `type` and `status` say why.
    return RpcError(INTERNAL_ERROR, error.detail, **members)


def from_agent_error(error: object, version: str) -> dict[str, Any]:
    """Pass an agent's JSON-RPC error on, its ``data`` reshaped for the client's version."""
    if not isinstance(error, dict):
        return RpcError(INTERNAL_ERROR, "the agent answered with a malformed error").render(version)
    out = dict(error)
    if "data" in out:
        code = out.get("code")
        members = members_of(out["data"])
        if members:
            out["data"] = error_data(code if isinstance(code, int) else 0, members, version)
        else:
            out.pop("data")
    return out
