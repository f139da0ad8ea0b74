"""One update an agent reports about a task, and how it is applied to the stored task (§8.1).

The same value comes from a stream frame (`SendStreamingMessage` / `message/stream`,
`SubscribeToTask` / `tasks/resubscribe`) or from a task snapshot (`GetTask` / `tasks/get`),
so the stream relay and the watcher record changes through one function.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.protocol import JSON, ProtocolError
from a2a_continue.core.task_reads import lock_task
from a2a_continue.core.tasks import apply_update
from a2a_continue.errors import NotFound
from a2a_continue.runtime.db import Conn, Record

SOURCES = frozenset({"stream", "subscribe", "poll", "refresh"})

# What one frame carries, as the SSE `event:` names it (§8.2).
TASK, MESSAGE, STATUS, ARTIFACT, ERROR = (
    "task",
    "message",
    "status-update",
    "artifact-update",
    "error",
)

_V10_KINDS = {
    "task": TASK,
    "message": MESSAGE,
    "statusUpdate": STATUS,
    "artifactUpdate": ARTIFACT,
}
_V03_KINDS = frozenset({TASK, MESSAGE, STATUS, ARTIFACT})


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
    """What one frame or snapshot says about a task."""

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
    message: JSON | None = None
    error_code: int | None = None
    error_message: str | None = None
    snapshot: JSON | None = field(default=None, repr=False)

    @property
    def settles(self) -> bool:
        """Tell whether this status leaves the agent waiting (interrupted) or done (terminal)."""
        return self.state is not None and (
            protocol.is_terminal_task_state(self.state)
            or protocol.is_interrupted_task_state(self.state)
        )

    def task(self) -> protocol.AgentTask | None:
        """The task this update names, as a first report of it (for `task_created`)."""
        if self.task_id is None:
            return None
        return protocol.AgentTask(
            id=self.task_id,
            context_id=self.context_id,
            state=self.state or "submitted",
            status_message=self.status_message,
            artifacts=[chunk.artifact for chunk in self.artifacts],
        )


def _string(raw: JSON, key: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"{key!r} is not a string")
    # Every string read here is an id the gateway may store.
    return None if value is None else protocol.storable_id(key, value)


def _status(raw: JSON, where: str) -> tuple[str, JSON | None, str | None]:
    status = raw.get("status")
    if not isinstance(status, dict):
        raise ProtocolError(f"the {where} has no 'status' object")
    message = status.get("message")
    timestamp = status.get("timestamp")
    return (
        protocol.canonical_state(status.get("state")),
        message if isinstance(message, dict) else None,
        timestamp if isinstance(timestamp, str) else None,
    )


def update_from_task(raw: object) -> Update:
    """Read a task snapshot (either version's shape): its status and every artifact."""
    if not isinstance(raw, dict):
        raise ProtocolError("the task is not an object")
    task_id = _string(raw, "id")
    if task_id is None:
        raise ProtocolError("the task has no string 'id'")
    state, message, timestamp = _status(raw, "task")
    artifacts = raw.get("artifacts")
    chunks = tuple(
        ArtifactChunk(a)
        for a in (artifacts if isinstance(artifacts, list) else [])
        if isinstance(a, dict)
    )
    return Update(
        kind=TASK,
        task_id=task_id,
        context_id=_string(raw, "contextId"),
        state=state,
        status_message=message,
        status_timestamp=timestamp,
        artifacts=chunks,
        snapshot=raw,
    )


def _status_update(raw: JSON) -> Update:
    state, message, timestamp = _status(raw, "status update")
    return Update(
        kind=STATUS,
        task_id=_string(raw, "taskId"),
        context_id=_string(raw, "contextId"),
        state=state,
        status_message=message,
        status_timestamp=timestamp,
        final=raw.get("final") is True,
    )


def _artifact_update(raw: JSON) -> Update:
    artifact = raw.get("artifact")
    if not isinstance(artifact, dict):
        raise ProtocolError("the artifact update has no 'artifact' object")
    chunk = ArtifactChunk(
        artifact, append=raw.get("append") is True, last_chunk=raw.get("lastChunk") is True
    )
    return Update(
        kind=ARTIFACT,
        task_id=_string(raw, "taskId"),
        context_id=_string(raw, "contextId"),
        artifacts=(chunk,),
    )


def _message(raw: JSON) -> Update:
    return Update(
        kind=MESSAGE,
        task_id=_string(raw, "taskId"),
        context_id=_string(raw, "contextId"),
        message=raw,
    )


def _payload(kind: str, raw: object) -> Update:
    if not isinstance(raw, dict):
        raise ProtocolError(f"the {kind} is not an object")
    if kind == TASK:
        return update_from_task(raw)
    if kind == MESSAGE:
        return _message(raw)
    if kind == STATUS:
        return _status_update(raw)
    return _artifact_update(raw)


def parse_result(result: object) -> Update:
    """Read the `result` of a stream frame or a send answer, in either version's shape."""
    if not isinstance(result, dict):
        raise ProtocolError("the JSON-RPC 'result' is not an object")
    for key, kind in _V10_KINDS.items():
        if key in result:
            return _payload(kind, result[key])
    v03_kind = result.get("kind")
    if isinstance(v03_kind, str) and v03_kind in _V03_KINDS:
        return _payload(v03_kind, result)
    if "id" in result and "status" in result:
        return update_from_task(result)
    if "messageId" in result and "parts" in result:
        return _message(result)
    raise ProtocolError("the 'result' is neither a task, a message nor a task update")


def parse_frame(body: object) -> Update:
    """Read one JSON-RPC object of an agent's stream (or a blocking answer) as an update."""
    result, error = protocol.open_response(body, "the frame")
    if error is not None:
        return Update(kind=ERROR, error_code=error.code, error_message=error.message)
    return parse_result(result)


# ---- applying an update ---------------------------------------------------------------------


def same_status_message(stored: JSON | None, reported: JSON | None) -> bool:
    """Compare two status messages by `messageId` when both have one, else by content."""
    if stored is None or reported is None:
        return stored is reported
    stored_id, reported_id = stored.get("messageId"), reported.get("messageId")
    if isinstance(stored_id, str) and isinstance(reported_id, str):
        return stored_id == reported_id
    return stored == reported


def merge_artifacts(
    stored: list[Any], chunks: tuple[ArtifactChunk, ...]
) -> tuple[list[Any], list[str]]:
    """Merge reported artifacts into the stored list by `artifactId`; return it and changed ids.

    `append: true` adds the chunk's parts to the stored artifact; otherwise the reported
    artifact replaces it. An artifact without an id is kept as a new one unless an equal
    one is stored already.
    """
    merged = list(stored)
    changed: list[str] = []
    for chunk in chunks:
        new = chunk.artifact
        key = chunk.artifact_id
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and key is not None and old.get("artifactId") == key
            ),
            None,
        )
        if index is None:
            if key is None and new in merged:
                continue
            merged.append(new)
        else:
            old = merged[index]
            if chunk.append:
                parts = new.get("parts")
                extra = parts if isinstance(parts, list) else []
                old_parts = old.get("parts")
                new = {**old, **{k: v for k, v in new.items() if k != "parts"}}
                new["parts"] = (old_parts if isinstance(old_parts, list) else []) + extra
            if new == old:
                continue
            merged[index] = new
        if key is not None and key not in changed:
            changed.append(key)
    return merged, changed


@dataclass(frozen=True, slots=True)
class Applied:
    """The task after an update: its state, and the event appended (None when nothing changed)."""

    state: str
    seq: int | None
    row: Record


async def record_update(
    conn: Conn,
    row_id: uuid.UUID,
    update: Update,
    *,
    source: str,
    actor: str,
    event: str = "task_updated",
    data: dict[str, Any] | None = None,
    always: bool = False,
) -> Applied:
    """Apply an update to the task (§8.1) and append its event; nothing changed, no event.

    ``event``/``data``/``always`` let a streamed follow-up log its first frame as
    `task_continued` even when that frame changes nothing. A terminal task is never changed.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown update source {source!r}")
    async with conn.transaction():
        row = await lock_task(conn, row_id)
        if row is None:
            raise NotFound("the task no longer exists")
        previous: str = row["state"]
        state, status_message = previous, row["status_message"]
        artifacts: list[Any] = row["artifacts"]
        changed: list[str] = []
        status_changed = False
        if not protocol.is_terminal_task_state(previous):
            if update.state is not None and (
                update.state != previous
                or not same_status_message(status_message, update.status_message)
            ):
                state, status_message = update.state, update.status_message
                status_changed = True
            artifacts, changed = merge_artifacts(artifacts, update.artifacts)
        if not status_changed and artifacts == row["artifacts"] and not always:
            return Applied(previous, None, row)
        payload: dict[str, Any] = {"source": source, **(data or {})}
        if changed:
            payload["artifactIds"] = changed
        stored = await apply_update(
            conn,
            row_id,
            state,
            status_message,
            artifacts,
            event=event,
            previous=previous,
            actor=actor,
            data=payload,
        )
    return Applied(str(stored["state"]), int(stored["last_seq"]), stored)
