"""The A2A wire: task states, parts, and the 0.3/1.0 requests (answers are read in answers.py)."""

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
_SET_PUSH_METHODS = {
    "0.3": "tasks/pushNotificationConfig/set",
    "1.0": "CreateTaskPushNotificationConfig",
}
_DELETE_PUSH_METHODS = {
    "0.3": "tasks/pushNotificationConfig/delete",
    "1.0": "DeleteTaskPushNotificationConfig",
}
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


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What the gateway sends an agent, as core decided it, in no version's shape:
    ``send_request`` builds the version's request from it."""

    message_id: str
    task_id: str | None
    context_id: str | None
    parts: list[JSON]
    metadata: JSON | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None
    history_length: int | None = None
    accepted_output_modes: list[str] | None = None
    return_immediately: bool | None = None
    # The send's own metadata (beside the message's).
    request_metadata: JSON | None = None
    # The gateway's own push config for the task the send starts (SPEC §19), if any.
    push: PushTarget | None = None


@dataclass(frozen=True, slots=True)
class PushTarget:
    """A push config the gateway gives an agent: where to push and the token to push with."""

    id: str
    url: str
    token: str


def push_config(version: str, push: PushTarget) -> JSON:
    """The push config as the version defines it: 0.3 ``token``; 1.0 ``token`` and a Bearer
    ``authentication`` with the token as its credentials (agents send either)."""
    config: JSON = {"id": push.id, "url": push.url, "token": push.token}
    if _check_version(version) == "1.0":
        config["authentication"] = {"scheme": "Bearer", "credentials": push.token}
    return config


def send_request(version: str, outgoing: Outgoing, *, streaming: bool = False) -> JSON:
    """The version's JSON-RPC send (its streaming one when asked) of ``outgoing``."""
    message = build_message(
        version,
        message_id=outgoing.message_id,
        task_id=outgoing.task_id,
        context_id=outgoing.context_id,
        parts=outgoing.parts,
        metadata=outgoing.metadata,
        extensions=outgoing.extensions,
        reference_task_ids=outgoing.reference_task_ids,
    )
    config = {
        "historyLength": outgoing.history_length,
        "acceptedOutputModes": outgoing.accepted_output_modes,
        **_return_immediately(outgoing.return_immediately, version),
    }
    if outgoing.push is not None:
        member = "taskPushNotificationConfig" if version == "1.0" else "pushNotificationConfig"
        config[member] = push_config(version, outgoing.push)
    return build_send_request(
        version, new_rpc_id(), message, config, outgoing.request_metadata, streaming=streaming
    )


def _return_immediately(value: bool | None, version: str) -> JSON:
    """Say "do not wait for the task to settle" as the version does (0.3: ``blocking``)."""
    if value is None:
        return {}
    return {"returnImmediately": value} if version == "1.0" else {"blocking": not value}


def build_cancel_request(version: str, rpc_id: str, task_id: str) -> JSON:
    """Build the JSON-RPC request that asks an agent to cancel a task."""
    method = _CANCEL_METHODS[_check_version(version)]
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {"id": task_id}}


def build_subscribe_request(version: str, rpc_id: str, task_id: str) -> JSON:
    """Build the JSON-RPC request that subscribes to a running task's stream."""
    method = _SUBSCRIBE_METHODS[_check_version(version)]
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {"id": task_id}}


def build_set_push_request(version: str, rpc_id: str, task_id: str, push: PushTarget) -> JSON:
    """Build the JSON-RPC request that gives an agent a push config for a task."""
    method = _SET_PUSH_METHODS[_check_version(version)]
    config = push_config(version, push)
    params = (
        {"taskId": task_id, **config}
        if version == "1.0"
        else {"taskId": task_id, "pushNotificationConfig": config}
    )
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


def build_delete_push_request(version: str, rpc_id: str, task_id: str, config_id: str) -> JSON:
    """Build the JSON-RPC request that deletes a push config of a task at the agent."""
    method = _DELETE_PUSH_METHODS[_check_version(version)]
    params = (
        {"taskId": task_id, "id": config_id}
        if version == "1.0"
        else {"id": task_id, "pushNotificationConfigId": config_id}
    )
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


# What answers carry


@dataclass(frozen=True, slots=True)
class AgentTask:
    """A task as an agent reported it, with its state made canonical."""

    id: str
    context_id: str | None
    state: str
    status_message: JSON | None
    artifacts: list[JSON]


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
