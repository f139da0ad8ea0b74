"""Translate A2A objects between protocol versions 0.3 and 1.0, in either direction.

Every function accepts an object in either version's shape and returns it in the asked
version's shape, so translating to the version an object already has changes nothing that
matters. Members the gateway does not know are carried over as they are.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from a2a_continue.a2a import answers, protocol

JSON = dict[str, Any]

_V10_STATES = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "unknown": "TASK_STATE_UNSPECIFIED",
}
_V03_ROLES = {"ROLE_USER": "user", "ROLE_AGENT": "agent", "user": "user", "agent": "agent"}
_V10_ROLES = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}

# Stream frames: 0.3 `kind` ↔ the 1.0 member of a StreamResponse.
_FRAME_MEMBERS = {
    answers.TASK: "task",
    answers.MESSAGE: "message",
    answers.STATUS: "statusUpdate",
    answers.ARTIFACT: "artifactUpdate",
}


def timestamp(at: dt.datetime) -> str:
    """An RFC 3339 UTC timestamp as A2A status timestamps are written (``…Z``)."""
    return at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def stamped(kind: str, obj: Any, state: str | None, at: dt.datetime | None) -> Any:
    """A task or status update the agent reported, its status timestamp the stored one (``at``,
    the time of the stored status ``state``) when it shows that status: one status, one time,
    whichever method shows it. Anything else is left as it is."""
    if at is None or kind not in (answers.TASK, answers.STATUS) or not isinstance(obj, dict):
        return obj
    status = obj.get("status")
    if not isinstance(status, dict) or protocol.canonical_state(status.get("state")) != state:
        return obj
    return {**obj, "status": {**status, "timestamp": timestamp(at)}}


def wire_state(state: object, version: str) -> str:
    """Spell a task state (any spelling) as ``version`` does."""
    canonical = protocol.canonical_state(state)
    return _V10_STATES[canonical] if version == "1.0" else canonical


def wire_role(role: object, version: str) -> object:
    """Spell a message role as ``version`` does; an unknown role is left alone."""
    if not isinstance(role, str):
        return role
    if version == "1.0":
        return _V10_ROLES.get(role, role)
    return _V03_ROLES.get(role, role)


def part(value: object, version: str) -> object:
    """Translate one part; a part the gateway cannot read is passed on as it is."""
    if not isinstance(value, dict):
        return value
    try:
        return protocol.to_v10_part(value) if version == "1.0" else protocol.to_v03_part(value)
    except ValueError:
        return value


def _parts(value: object, version: str) -> object:
    return [part(p, version) for p in value] if isinstance(value, list) else value


def _with_kind(obj: JSON, kind: str, version: str) -> JSON:
    out = {k: v for k, v in obj.items() if k != "kind"}
    return {"kind": kind, **out} if version == "0.3" else out


def message(value: object, version: str) -> object:
    """Translate a message: its role, its parts and its ``kind``."""
    if not isinstance(value, dict):
        return value
    out = _with_kind(value, "message", version)
    if "role" in out:
        out["role"] = wire_role(out["role"], version)
    if "parts" in out:
        out["parts"] = _parts(out["parts"], version)
    return out


def status(value: object, version: str) -> object:
    """Translate a task status: its state and its message."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    out["state"] = wire_state(out.get("state"), version)
    if isinstance(out.get("message"), dict):
        out["message"] = message(out["message"], version)
    return out


def artifact(value: object, version: str) -> object:
    """Translate an artifact's parts."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    if "parts" in out:
        out["parts"] = _parts(out["parts"], version)
    return out


def task(value: object, version: str, history_length: int | None = None) -> object:
    """Translate a task; ``history_length`` keeps only the last messages of its history."""
    if not isinstance(value, dict):
        return value
    out = _with_kind(value, "task", version)
    if "status" in out:
        out["status"] = status(out["status"], version)
    if isinstance(out.get("artifacts"), list):
        out["artifacts"] = [artifact(a, version) for a in out["artifacts"]]
    history = out.get("history")
    if isinstance(history, list):
        if history_length is not None:
            history = history[-history_length:] if history_length > 0 else []
        out["history"] = [message(m, version) for m in history]
    return out


def status_update(value: JSON, version: str, final: bool) -> JSON:
    """Translate a status-update event; 0.3 carries ``final`` (the caller's), 1.0 does not.

    The gateway decides `final` itself: agents disagree on it, and clients rely on it.
    """
    out = _with_kind(value, "status-update", version)
    if "status" in out:
        out["status"] = status(out["status"], version)
    if version == "0.3":
        out["final"] = final
    else:
        out.pop("final", None)
    return out


def artifact_update(value: JSON, version: str) -> JSON:
    """Translate an artifact-update event."""
    out = _with_kind(value, "artifact-update", version)
    if "artifact" in out:
        out["artifact"] = artifact(out["artifact"], version)
    return out


def shaped(kind: str, obj: Any, version: str, *, final: bool = False) -> object:
    """Translate what a send answer or a stream frame carries, ``kind`` being what it is (as
    the reader of agent answers says), with the version's wrapping.

    1.0 wraps the object in a member named after what it is (``{"task": …}``); 0.3 sends
    it bare with its ``kind``. ``final`` is the 0.3 flag of a status update.
    """
    if kind == answers.TASK:
        out = task(obj, version)
    elif kind == answers.MESSAGE:
        out = message(obj, version)
    elif kind == answers.STATUS:
        out = status_update(obj, version, final)
    else:
        out = artifact_update(obj, version)
    return {_FRAME_MEMBERS[kind]: out} if version == "1.0" else out


def result(value: object, version: str, *, final: bool = False) -> object:
    """Translate the ``result`` of a send answer or a stream frame (what it is, the reader says);
    one the reader cannot read is passed on as it is."""
    try:
        found = answers.read_result(value, version, frame=True)
    except protocol.ProtocolError:
        return value
    return shaped(found.kind, found.raw, version, final=final)
