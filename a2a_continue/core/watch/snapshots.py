"""Asking an agent how a task stands (``GetTask`` / ``tasks/get``), and what marks a status.

The one GetTask of the gateway: the watcher's polls, ``GET …?refresh=true`` and the façade's
GetTask all ask through ``ask_agent``.
"""

from __future__ import annotations

from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import Update
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.core.agents.exchange import exchange
from a2a_continue.runtime.gateway import Gateway

TASK_NOT_FOUND = -32001
_GET_TASK_METHODS = {"0.3": "tasks/get", "1.0": "GetTask"}


def get_task_request(
    version: str, task_id: str, history_length: int | None = None
) -> dict[str, Any]:
    """Build the JSON-RPC request that asks an agent for one task (``historyLength`` if given)."""
    params: dict[str, Any] = {"id": task_id}
    if history_length is not None:
        params["historyLength"] = history_length
    return {
        "jsonrpc": "2.0",
        "id": protocol.new_rpc_id(),
        "method": _GET_TASK_METHODS[version],
        "params": params,
    }


async def ask_agent(
    gw: Gateway, target: AgentTarget, task_id: str, history_length: int | None = None
) -> Update:
    """Ask the agent for the task now: its snapshot, or the JSON-RPC error it answered.

    An agent that cannot be reached, answers late or answers something else raises the
    502/504 errors of a call; one with all its call slots taken, AgentBusy (503).
    """
    payload = get_task_request(target.protocol_version, task_id, history_length)
    _, answer = await exchange(gw, target, payload)
    return answer


def status_mark(update: Update) -> dict[str, Any]:
    """What identifies a reported status: its state, timestamp and message (by id if any)."""
    message = update.status_message
    message_id = message.get("messageId") if message else None
    return {
        "state": update.state,
        "timestamp": update.status_timestamp,
        "message": message_id if isinstance(message_id, str) else message,
    }
