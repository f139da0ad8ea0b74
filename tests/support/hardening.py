"""Helpers of the hardening tests: a scriptable agent and what a refused request leaves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import msgspec

JSON = dict[str, Any]


def rpc_result(request: JSON, result: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def task_v10(task_id: str, state: str, context_id: str | None = "C1", text: str = "ok") -> JSON:
    """A 1.0 task answer carrying ``text`` in its status message and one artifact."""
    task: JSON = {
        "id": task_id,
        "status": {
            "state": "TASK_STATE_" + state.upper().replace("-", "_"),
            "message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": text}]},
        },
        "artifacts": [{"artifactId": "a1", "parts": [{"text": text}]}],
    }
    if context_id is not None:
        task["contextId"] = context_id
    return {"task": task}


class Scripted:
    """A 1.0 agent: starts, follow-ups and cancels each answered by a function of the request.

    Each function returns the JSON-RPC ``result`` object, or bytes sent as the whole body.
    """

    def __init__(
        self,
        start: Callable[[JSON], Any] | None = None,
        follow_up: Callable[[JSON], Any] | None = None,
        cancel: Callable[[JSON], Any] | None = None,
    ) -> None:
        self.start = start or (lambda r: task_v10("T1", "input-required"))
        self.follow_up = follow_up or (lambda r: task_v10("T1", "completed"))
        self.cancel = cancel or (lambda r: task_v10(r["params"]["id"], "canceled"))
        self.sent: list[bytes] = []

    async def __call__(self, request: JSON) -> Any:
        if request["method"] in ("CancelTask", "tasks/cancel"):
            answer = self.cancel(request)
        elif "taskId" in request["params"]["message"]:
            answer = self.follow_up(request)
        else:
            answer = self.start(request)
        raw = (
            answer
            if isinstance(answer, bytes)
            else msgspec.json.encode(rpc_result(request, answer))
        )
        self.sent.append(raw)
        return raw


async def counts(db: asyncpg.Connection) -> tuple[int, int, int]:
    """How many agents, tasks and events the database holds."""
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM a2a_agents), (SELECT count(*) FROM a2a_tasks),"
        " (SELECT count(*) FROM a2a_task_events)"
    )
    assert row is not None
    return row[0], row[1], row[2]
