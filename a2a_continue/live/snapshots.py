"""Asking an agent how a task stands (``GetTask`` / ``tasks/get``) and recording the answer."""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue import protocol
from a2a_continue.db import Conn
from a2a_continue.downstream import AgentReply, AgentTarget
from a2a_continue.gateway import Gateway
from a2a_continue.outbound import exchange
from a2a_continue.tasks import record_outcome

TASK_NOT_FOUND = -32001
_GET_TASK_METHODS = {"0.3": "tasks/get", "1.0": "GetTask"}


def get_task_request(version: str, task_id: str) -> dict[str, Any]:
    """Build the JSON-RPC request that asks an agent for one task."""
    method = _GET_TASK_METHODS[version]
    return {
        "jsonrpc": "2.0",
        "id": protocol.new_rpc_id(),
        "method": method,
        "params": {"id": task_id},
    }


async def ask_agent(
    gw: Gateway, target: AgentTarget, task_id: str
) -> tuple[AgentReply, protocol.AgentAnswer]:
    """Ask the agent for the task now (502/504 errors when it cannot answer)."""
    return await exchange(gw, target, get_task_request(target.protocol_version, task_id))


def raw_task(body: Any) -> dict[str, Any] | None:
    """The task object of an answer (1.0 sends wrap it in ``task``; GetTask answers it bare)."""
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, dict):
        return None
    inner = result.get("task")
    return inner if isinstance(inner, dict) else result


def status_mark(task: protocol.AgentTask, raw: dict[str, Any] | None) -> dict[str, Any]:
    """What identifies a status: its state, its timestamp and its message (by id if it has one)."""
    status = raw.get("status") if isinstance(raw, dict) else None
    stamp = status.get("timestamp") if isinstance(status, dict) else None
    message = task.status_message
    message_id = message.get("messageId") if message else None
    return {
        "state": task.state,
        "timestamp": stamp if isinstance(stamp, str) else None,
        "message": message_id if isinstance(message_id, str) else message,
    }


def _same_message(stored: Any, reported: Any) -> bool:
    if isinstance(stored, dict) and isinstance(reported, dict):
        stored_id, reported_id = stored.get("messageId"), reported.get("messageId")
        if stored_id is not None or reported_id is not None:
            return bool(stored_id == reported_id)
    return bool(stored == reported)


def _changed_artifacts(stored: list[Any], reported: list[dict[str, Any]]) -> list[str]:
    before = {a.get("artifactId"): a for a in stored if isinstance(a, dict)}
    return [str(a.get("artifactId")) for a in reported if before.get(a.get("artifactId")) != a]


async def record_snapshot(
    conn: Conn, row_id: uuid.UUID, task: protocol.AgentTask, source: str, actor: str
) -> str | None:
    """Store the task as the agent reports it; log `task_updated` when anything changed.

    Returns the stored state, or None when the task no longer exists.
    """
    async with conn.transaction():
        row = await conn.fetchrow(
            "SELECT state, status_message, artifacts FROM a2a_tasks WHERE id = $1 FOR UPDATE",
            row_id,
        )
        if row is None:
            return None
        if protocol.is_terminal_task_state(row["state"]):
            return str(row["state"])
        artifact_ids = _changed_artifacts(row["artifacts"], task.artifacts)
        if (
            row["state"] == task.state
            and _same_message(row["status_message"], task.status_message)
            and not artifact_ids
        ):
            return str(row["state"])
        data: dict[str, Any] = {"source": source}
        if artifact_ids:
            data["artifactIds"] = artifact_ids
        stored = await record_outcome(
            conn,
            row_id,
            state=task.state,
            status_message=task.status_message,
            artifacts=task.artifacts or None,
            event="task_updated",
            actor=actor,
            data=data,
        )
        return str(stored["state"])
