"""The sample agent's tasks: their turns (each works a while, then asks or completes) and how
they are rendered in either protocol version."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]

TERMINAL = frozenset({"completed", "canceled", "failed", "rejected"})
QUESTION = "Which city?"


def now() -> str:
    """The current time as A2A timestamps show it."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _clock() -> float:
    return asyncio.get_running_loop().time()


@dataclass
class Task:
    """One task of the sample agent."""

    id: str
    context_id: str
    state: str = "working"
    # The question it asks, with one message id per question (asking again is a new status).
    question: str | None = None
    question_id: str = ""
    artifacts: list[tuple[str, str]] = field(default_factory=list)  # (artifactId, text)
    updated: str = field(default_factory=now)
    # While working: when the turn ends (loop time) and its city (None: it asks for one).
    ready_at: float | None = None
    city: str | None = None


def work(task: Task, slow_s: float, city: str | None) -> None:
    """Start a turn: the task works for ``slow_s``, then asks (no city) or completes."""
    task.state, task.question, task.updated = "working", None, now()
    task.city, task.ready_at = city, _clock() + slow_s


def go_on(task: Task) -> None:
    """End the turn of a working task whose time has come."""
    if task.ready_at is None or _clock() < task.ready_at:
        return
    task.ready_at, task.updated = None, now()
    if task.city is None:
        task.state, task.question, task.question_id = "input-required", QUESTION, str(uuid.uuid4())
    else:
        task.artifacts.append((str(uuid.uuid4()), f"Sunny in {task.city}"))
        task.state = "completed"


async def settled(task: Task) -> None:
    """Wait until the task's turn is over (or the task is canceled)."""
    while task.ready_at is not None:
        await asyncio.sleep(max(task.ready_at - _clock(), 0.0))
        go_on(task)


def cancel(task: Task) -> None:
    """Cancel the task, ending any turn."""
    task.state, task.question, task.updated, task.ready_at = "canceled", None, now(), None


def text_part(version: str, text: str) -> JSON:
    """A text part in the version's shape."""
    return {"text": text} if version == "1.0" else {"kind": "text", "text": text}


def _state_name(version: str, state: str) -> str:
    return "TASK_STATE_" + state.upper().replace("-", "_") if version == "1.0" else state


def render(task: Task, version: str) -> JSON:
    """The task as the version shows it (a `GetTask` result)."""
    status: JSON = {"state": _state_name(version, task.state), "timestamp": task.updated}
    if task.question is not None:
        message: JSON = {
            "messageId": task.question_id,
            "role": "ROLE_AGENT" if version == "1.0" else "agent",
            "taskId": task.id,
            "contextId": task.context_id,
            "parts": [text_part(version, task.question)],
        }
        status["message"] = message if version == "1.0" else {"kind": "message", **message}
    body: JSON = {"id": task.id, "contextId": task.context_id, "status": status}
    if task.artifacts:
        body["artifacts"] = [
            {"artifactId": aid, "name": "forecast", "parts": [text_part(version, text)]}
            for aid, text in task.artifacts
        ]
    return body if version == "1.0" else {"kind": "task", **body}
