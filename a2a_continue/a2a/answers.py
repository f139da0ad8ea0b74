"""The one reader of what an agent answered: a JSON-RPC answer or stream frame, as one Update.

A blocking answer (`SendMessage` / `message/send`, `CancelTask`, `GetTask`) is a task, a
message or a JSON-RPC error; a frame of a stream (`SendStreamingMessage`, `SubscribeToTask`)
may also be a status or an artifact update. Either version's shape is read. Every caller asks
``read`` once per answer or frame and passes the value on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.protocol import JSON, AgentTask, ProtocolError, storable_id

# What one answer or frame carries, as the SSE `event:` names it (§8.2).
TASK, MESSAGE, STATUS, ARTIFACT, ERROR = (
    "task",
    "message",
    "status-update",
    "artifact-update",
    "error",
)

# 1.0 wraps the object in a member named after what it is; 0.3 tags it with `kind`.
_FRAME_MEMBERS = {
    "task": TASK,
    "message": MESSAGE,
    "statusUpdate": STATUS,
    "artifactUpdate": ARTIFACT,
}
_ANSWER_MEMBERS = {"task": TASK, "message": MESSAGE}


@dataclass(frozen=True, slots=True)
class ArtifactChunk:
    """An artifact as reported: the whole of it, or parts to append to the stored one."""

    artifact: JSON
    append: bool = False
    last_chunk: bool = False

    @property
    def artifact_id(self) -> str | None:
        """The id artifacts are merged by (None when the agent sent none)."""
        value = self.artifact.get("artifactId")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Update:
    """What one answer or frame says about a task."""

    kind: str
    task_id: str | None = None
    context_id: str | None = None
    # Canonical state; None when the frame reports no status (an artifact, a message).
    state: str | None = None
    status_message: JSON | None = None
    status_timestamp: str | None = None
    artifacts: tuple[ArtifactChunk, ...] = ()
    # 0.3 status updates mark the last frame of a stream with `final: true`.
    final: bool = False
    error_code: int | None = None
    error_message: str | None = None
    # The object as the agent sent it (a task, a message, an update, or the JSON-RPC error),
    # unwrapped from 1.0's member: what is passed on or translated for a client.
    raw: Any = field(default=None, repr=False)

    @property
    def settles(self) -> bool:
        """Tell whether this status leaves the agent waiting (interrupted) or done (terminal)."""
        return self.state is not None and (
            protocol.is_terminal_task_state(self.state)
            or protocol.is_interrupted_task_state(self.state)
        )

    def task(self) -> AgentTask | None:
        """The task this update names, as a first report of it (for `task_created`)."""
        if self.task_id is None:
            return None
        return AgentTask(
            id=self.task_id,
            context_id=self.context_id,
            state=self.state or "submitted",
            status_message=self.status_message,
            artifacts=[chunk.artifact for chunk in self.artifacts],
        )

    @property
    def answered(self) -> AgentTask | None:
        """The task a send, a cancel or a GetTask was answered with (None: a message, an error)."""
        return self.task() if self.kind == TASK else None


def _open(body: object, what: str) -> tuple[Any, JSON | None]:
    """Check a JSON-RPC 2.0 response named ``what``; return its result, or its error object."""
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
        return None, error
    if "result" not in body:
        raise ProtocolError(f"{what} has neither 'result' nor 'error'")
    return body["result"], None


def read(body: object, version: str, *, frame: bool = False) -> Update:
    """Read an agent's decoded JSON-RPC answer (``frame``: one frame of its stream)."""
    result, error = _open(body, "the frame" if frame else "the answer")
    if error is None:
        return read_result(result, version, frame=frame)
    message = error.get("message")
    return Update(
        ERROR,
        error_code=error["code"],
        error_message=message if isinstance(message, str) else None,
        raw=error,
    )


# ---- the result -----------------------------------------------------------------------------

_Found = tuple[str, object] | None


def _wrapped(result: JSON, members: dict[str, str]) -> _Found:
    for member, kind in members.items():
        if member in result:
            return kind, result[member]
    return None


def _tagged(result: JSON, members: dict[str, str]) -> _Found:
    kind = result.get("kind")
    return (kind, result) if isinstance(kind, str) and kind in members.values() else None


def _bare(result: JSON, members: dict[str, str]) -> _Found:
    # Some agents leave out `kind`: tell a task from a message by its members.
    if "id" in result and "status" in result:
        return TASK, result
    if "messageId" in result and "parts" in result:
        return MESSAGE, result
    return None


_Shape = Callable[[JSON, dict[str, str]], _Found]
_V03_FIRST: tuple[_Shape, ...] = (_tagged, _wrapped, _bare)
_V10_FIRST: tuple[_Shape, ...] = (_wrapped, _tagged, _bare)


def read_result(result: object, version: str, *, frame: bool) -> Update:
    """Read the ``result`` of an answer or a frame: which object it carries, and what it says.

    The registered version only decides which shape is tried first: agents drift.
    """
    if not isinstance(result, dict):
        raise ProtocolError("the JSON-RPC 'result' is not an object")
    members = _FRAME_MEMBERS if frame else _ANSWER_MEMBERS
    for shape in _V03_FIRST if version == "0.3" else _V10_FIRST:
        found = shape(result, members)
        if found is not None:
            return _payload(*found, where="" if frame else " in the answer", frame=frame)
    if frame:
        raise ProtocolError("the 'result' is neither a task, a message nor a task update")
    raise ProtocolError("the 'result' is neither a task nor a message")


def _payload(kind: str, raw: object, *, where: str, frame: bool) -> Update:
    if not isinstance(raw, dict):
        raise ProtocolError(f"the {kind}{where} is not an object")
    if kind == TASK:
        return _task(raw, where)
    if kind == MESSAGE:
        # A frame's message names the task it is about; an answer's is about the call's task.
        if not frame:
            return Update(MESSAGE, raw=raw)
        return Update(MESSAGE, _string(raw, "taskId"), _string(raw, "contextId"), raw=raw)
    if kind == STATUS:
        return _status_update(raw)
    return _artifact_update(raw)


def _string(raw: JSON, key: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"{key!r} is not a string")
    # Every string read here is an id the gateway may store.
    return None if value is None else storable_id(key, value)


def _status(raw: JSON, where: str) -> tuple[str, JSON | None, str | None]:
    status = raw.get("status")
    if not isinstance(status, dict):
        raise ProtocolError(f"{where} has no 'status' object")
    message = status.get("message")
    timestamp = status.get("timestamp")
    return (
        protocol.canonical_state(status.get("state")),
        message if isinstance(message, dict) else None,
        timestamp if isinstance(timestamp, str) else None,
    )


def _task(raw: JSON, where: str) -> Update:
    """A task snapshot: its status and every artifact; its ids as the store keeps them."""
    task_id = raw.get("id")
    if not isinstance(task_id, str):
        raise ProtocolError(f"the task{where} has no string 'id'")
    state, message, timestamp = _status(raw, f"task {task_id!r}")
    context_id = raw.get("contextId")
    if context_id is not None and not isinstance(context_id, str):
        raise ProtocolError(f"task {task_id!r} has a non-string 'contextId'")
    artifacts = raw.get("artifacts")
    # Stored copies hold no U+0000 (PostgreSQL text cannot); the caller gets the raw bytes.
    return Update(
        TASK,
        storable_id("id", task_id),
        None if context_id is None else storable_id("contextId", context_id),
        state=state,
        status_message=message,
        status_timestamp=timestamp,
        artifacts=tuple(
            ArtifactChunk(a)
            for a in (artifacts if isinstance(artifacts, list) else [])
            if isinstance(a, dict)
        ),
        raw=raw,
    )


def _status_update(raw: JSON) -> Update:
    state, message, timestamp = _status(raw, "the status update")
    return Update(
        STATUS,
        _string(raw, "taskId"),
        _string(raw, "contextId"),
        state=state,
        status_message=message,
        status_timestamp=timestamp,
        final=raw.get("final") is True,
        raw=raw,
    )


def _artifact_update(raw: JSON) -> Update:
    artifact = raw.get("artifact")
    if not isinstance(artifact, dict):
        raise ProtocolError("the artifact update has no 'artifact' object")
    chunk = ArtifactChunk(
        artifact, append=raw.get("append") is True, last_chunk=raw.get("lastChunk") is True
    )
    return Update(
        ARTIFACT, _string(raw, "taskId"), _string(raw, "contextId"), artifacts=(chunk,), raw=raw
    )
