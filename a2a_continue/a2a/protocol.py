"""The A2A wire: task states, 0.3/1.0 message builders and the JSON-RPC answer parser."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from a2a_continue.limits import MAX_ID_CHARS, scrub
from a2a_continue.obs.telemetry import new_id

JSON = dict[str, Any]

CANONICAL_STATES: tuple[str, ...] = (
    "submitted",
    "working",
    "input-required",
    "auth-required",
    "completed",
    "canceled",
    "failed",
    "rejected",
    "unknown",
)
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "canceled", "failed", "rejected"})
INTERRUPTED_STATES: frozenset[str] = frozenset({"input-required", "auth-required"})
PROTOCOL_VERSIONS = ("0.3", "1.0")
USER_ROLES = frozenset({"user", "ROLE_USER"})

_STATE_PREFIX = "task-state-"
_STATE_ALIASES = {"cancelled": "canceled"}
_SEND_METHODS = {"0.3": "message/send", "1.0": "SendMessage"}
_STREAM_METHODS = {"0.3": "message/stream", "1.0": "SendStreamingMessage"}
_CANCEL_METHODS = {"0.3": "tasks/cancel", "1.0": "CancelTask"}
_SUBSCRIBE_METHODS = {"0.3": "tasks/resubscribe", "1.0": "SubscribeToTask"}
_V10_CONTENT_FIELDS = ("text", "raw", "url", "data")


def canonical_state(raw: object) -> str:
    """Map any spelling of a task state an agent may send to its canonical name."""
    if not isinstance(raw, str):
        return "unknown"
    state = raw.strip().lower().replace("_", "-")
    state = state.removeprefix(_STATE_PREFIX)
    state = _STATE_ALIASES.get(state, state)
    return state if state in CANONICAL_STATES else "unknown"


def is_terminal_task_state(raw: object) -> bool:
    """Tell whether a task state, in any spelling, is terminal."""
    return canonical_state(raw) in TERMINAL_STATES


def is_interrupted_task_state(raw: object) -> bool:
    """Tell whether a task state, in any spelling, waits for a follow-up message."""
    return canonical_state(raw) in INTERRUPTED_STATES


def _check_version(version: str) -> str:
    if version not in PROTOCOL_VERSIONS:
        raise ValueError(f"unsupported A2A protocol version {version!r}")
    return version


def wire_role(version: str) -> str:
    """Return the user role as the given protocol version spells it."""
    return "user" if _check_version(version) == "0.3" else "ROLE_USER"


def new_rpc_id() -> str:
    """Return a fresh JSON-RPC request id (unique per process run, cheap to make)."""
    return new_id()


# Parts


@dataclass(frozen=True, slots=True)
class _Content:
    """A part reduced to the 1.0 vocabulary, whatever shape it arrived in."""

    field: str  # one of _V10_CONTENT_FIELDS
    value: Any
    filename: Any
    media_type: Any
    metadata: Any


def _read_part(part: JSON) -> _Content:
    if not isinstance(part, dict):
        raise ValueError("a part must be an object")
    kind = part.get("kind")
    metadata = part.get("metadata")
    if kind == "file" or (kind is None and isinstance(part.get("file"), dict)):
        file = part.get("file")
        if not isinstance(file, dict):
            raise ValueError("a file part needs a 'file' object")
        sources = [key for key in ("bytes", "uri") if key in file]
        if len(sources) != 1 or not isinstance(file[sources[0]], str):
            raise ValueError("a file needs exactly one of 'bytes' or 'uri', as a string")
        field = "raw" if sources[0] == "bytes" else "url"
        return _Content(field, file[sources[0]], file.get("name"), file.get("mimeType"), metadata)
    if kind in ("text", "data"):
        if kind not in part:
            raise ValueError(f"a {kind} part needs a {kind!r} member")
        return _Content(kind, part[kind], None, None, metadata)
    if kind is not None:
        raise ValueError(f"unknown part kind {kind!r}")
    fields = [key for key in _V10_CONTENT_FIELDS if key in part]
    if len(fields) != 1:
        raise ValueError("a part needs exactly one of 'text', 'raw', 'url' or 'data'")
    field = fields[0]
    if field != "data" and not isinstance(part[field], str):
        raise ValueError(f"a part's {field!r} must be a string")
    return _Content(field, part[field], part.get("filename"), part.get("mediaType"), metadata)


def to_v03_part(part: JSON) -> JSON:
    """Return a part, given in either shape, in the 0.3 shape."""
    content = _read_part(part)
    out: JSON
    if content.field == "text":
        out = {"kind": "text", "text": content.value}
    elif content.field == "data":
        data = content.value
        out = {"kind": "data", "data": data if isinstance(data, dict) else {"value": data}}
    else:
        file: JSON = {"bytes" if content.field == "raw" else "uri": content.value}
        if content.filename is not None:
            file["name"] = content.filename
        if content.media_type is not None:
            file["mimeType"] = content.media_type
        out = {"kind": "file", "file": file}
    if content.metadata is not None:
        out["metadata"] = content.metadata
    return out


def to_v10_part(part: JSON) -> JSON:
    """Return a part, given in either shape, in the 1.0 shape."""
    content = _read_part(part)
    out: JSON = {content.field: content.value}
    if content.filename is not None:
        out["filename"] = content.filename
    if content.media_type is not None:
        out["mediaType"] = content.media_type
    if content.metadata is not None:
        out["metadata"] = content.metadata
    return out


# Requests


def build_message(
    version: str,
    *,
    message_id: str,
    task_id: str | None,
    context_id: str | None,
    parts: list[JSON],
    metadata: JSON | None = None,
    extensions: list[str] | None = None,
    reference_task_ids: list[str] | None = None,
) -> JSON:
    """Build a user message in the given protocol version's shape."""
    is_v03 = _check_version(version) == "0.3"
    message: JSON = {"kind": "message"} if is_v03 else {}
    message["messageId"] = message_id
    message["role"] = wire_role(version)
    if task_id is not None:
        message["taskId"] = task_id
    if context_id is not None:
        message["contextId"] = context_id
    convert = to_v03_part if is_v03 else to_v10_part
    message["parts"] = [convert(part) for part in parts]
    if metadata is not None:
        message["metadata"] = metadata
    if extensions is not None:
        message["extensions"] = extensions
    if reference_task_ids is not None:
        message["referenceTaskIds"] = reference_task_ids
    return message


def build_send_request(
    version: str,
    rpc_id: str,
    message: JSON,
    configuration: JSON | None = None,
    metadata: JSON | None = None,
    *,
    streaming: bool = False,
) -> JSON:
    """Build the JSON-RPC request that sends a message to an agent (or asks for a stream)."""
    params: JSON = {"message": message}
    config = {key: value for key, value in (configuration or {}).items() if value is not None}
    if config:
        params["configuration"] = config
    if metadata is not None:
        params["metadata"] = metadata
    methods = _STREAM_METHODS if streaming else _SEND_METHODS
    method = methods[_check_version(version)]
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


def build_cancel_request(version: str, rpc_id: str, task_id: str) -> JSON:
    """Build the JSON-RPC request that asks an agent to cancel a task."""
    method = _CANCEL_METHODS[_check_version(version)]
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {"id": task_id}}


def build_subscribe_request(version: str, rpc_id: str, task_id: str) -> JSON:
    """Build the JSON-RPC request that subscribes to a running task's stream."""
    method = _SUBSCRIBE_METHODS[_check_version(version)]
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {"id": task_id}}


# Answers


@dataclass(frozen=True, slots=True)
class AgentTask:
    """A task as an agent reported it, with its state made canonical."""

    id: str
    context_id: str | None
    state: str
    status_message: JSON | None
    artifacts: list[JSON]


@dataclass(frozen=True, slots=True)
class AgentAnswer:
    """What an agent answered: exactly one of a task, a message or a JSON-RPC error."""

    task: AgentTask | None
    message: JSON | None
    error_code: int | None
    error_message: str | None


class ProtocolError(ValueError):
    """The agent's body is not a JSON-RPC answer the gateway understands."""


def storable_id(name: str, value: str) -> str:
    """Check an agent-chosen id fits the store (a task id 1-500 characters, a context id at
    most 500) and return the copy to store: U+0000 becomes U+FFFD."""
    low = 0 if name == "contextId" else 1
    if not low <= len(value) <= MAX_ID_CHARS:
        raise ProtocolError(
            f"the task's {name!r} has {len(value)} characters; the gateway stores {low} to "
            f"{MAX_ID_CHARS}"
        )
    stored: str = scrub(value)
    return stored


def _parse_task(raw: object) -> AgentAnswer:
    if not isinstance(raw, dict):
        raise ProtocolError("the task in the answer is not an object")
    task_id = raw.get("id")
    if not isinstance(task_id, str):
        raise ProtocolError("the task in the answer has no string 'id'")
    status = raw.get("status")
    if not isinstance(status, dict):
        raise ProtocolError(f"task {task_id!r} has no 'status' object")
    context_id = raw.get("contextId")
    if context_id is not None and not isinstance(context_id, str):
        raise ProtocolError(f"task {task_id!r} has a non-string 'contextId'")
    status_message = status.get("message")
    artifacts = raw.get("artifacts")
    # Stored copies hold no U+0000 (PostgreSQL text cannot); the caller gets the raw bytes.
    task = AgentTask(
        id=storable_id("id", task_id),
        context_id=None if context_id is None else storable_id("contextId", context_id),
        state=canonical_state(status.get("state")),
        status_message=status_message if isinstance(status_message, dict) else None,
        artifacts=[a for a in artifacts if isinstance(a, dict)]
        if isinstance(artifacts, list)
        else [],
    )
    return AgentAnswer(task=task, message=None, error_code=None, error_message=None)


def _parse_message(raw: object) -> AgentAnswer:
    if not isinstance(raw, dict):
        raise ProtocolError("the message in the answer is not an object")
    return AgentAnswer(task=None, message=raw, error_code=None, error_message=None)


def _parse_v10(result: JSON) -> AgentAnswer | None:
    if "task" in result:
        return _parse_task(result["task"])
    if "message" in result:
        return _parse_message(result["message"])
    return None


def _parse_v03(result: JSON) -> AgentAnswer | None:
    kind = result.get("kind")
    if kind == "task":
        return _parse_task(result)
    if kind == "message":
        return _parse_message(result)
    return None


def _parse_bare(result: JSON) -> AgentAnswer | None:
    if "id" in result and "status" in result:
        return _parse_task(result)
    if "messageId" in result and "parts" in result:
        return _parse_message(result)
    return None


@dataclass(frozen=True, slots=True)
class RpcError:
    """The JSON-RPC error an agent answered with."""

    code: int
    message: str | None


def open_response(body: object, what: str) -> tuple[Any, RpcError | None]:
    """Check a decoded JSON-RPC 2.0 response named ``what``; return its result or its error."""
    if not isinstance(body, dict):
        raise ProtocolError(f"{what} is not a JSON object")
    if body.get("jsonrpc") != "2.0":
        raise ProtocolError(f"{what} is not JSON-RPC 2.0 ('jsonrpc' is not \"2.0\")")
    error = body.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise ProtocolError("the JSON-RPC 'error' is not an object")
        code = error.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            raise ProtocolError("the JSON-RPC error has no integer 'code'")
        message = error.get("message")
        return None, RpcError(code, message if isinstance(message, str) else None)
    if "result" not in body:
        raise ProtocolError(f"{what} has neither 'result' nor 'error'")
    return body["result"], None


def parse_answer(version: str, body: object) -> AgentAnswer:
    """Parse an agent's decoded JSON-RPC response into a task, a message or an error."""
    result, error = open_response(body, "the answer")
    if error is not None:
        return AgentAnswer(
            task=None, message=None, error_code=error.code, error_message=error.message
        )
    if not isinstance(result, dict):
        raise ProtocolError("the JSON-RPC 'result' is not an object")
    # The registered version only decides which shape to try first: agents drift.
    first, second = (
        (_parse_v03, _parse_v10) if _check_version(version) == "0.3" else (_parse_v10, _parse_v03)
    )
    for parse in (first, second, _parse_bare):
        answer = parse(result)
        if answer is not None:
            return answer
    raise ProtocolError("the 'result' is neither a task nor a message")
