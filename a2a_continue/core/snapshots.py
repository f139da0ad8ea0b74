"""Asking an agent how a task stands (``GetTask`` / ``tasks/get``), and what marks a status."""

from __future__ import annotations

from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.core.exchange import exchange
from a2a_continue.core.updates import Update, parse_frame
from a2a_continue.errors import AgentBadAnswer
from a2a_continue.runtime.gateway import Gateway

TASK_NOT_FOUND = -32001
_GET_TASK_METHODS = {"0.3": "tasks/get", "1.0": "GetTask"}


def get_task_request(version: str, task_id: str) -> dict[str, Any]:
    """Build the JSON-RPC request that asks an agent for one task."""
    return {
        "jsonrpc": "2.0",
        "id": protocol.new_rpc_id(),
        "method": _GET_TASK_METHODS[version],
        "params": {"id": task_id},
    }


async def ask_agent(gw: Gateway, target: AgentTarget, task_id: str) -> Update:
    """Ask the agent for the task now: its snapshot, or the JSON-RPC error it answered.

    An agent that cannot be reached, answers late or answers something else raises the
    502/504 errors of a call; one with all its call slots taken, AgentBusy (503).
    """
    payload = get_task_request(target.protocol_version, task_id)
    reply, _ = await exchange(gw, target, payload)
    try:
        return parse_frame(reply.body)
    except protocol.ProtocolError as exc:
        raise AgentBadAnswer(f"the agent's answer to GetTask is not a task: {exc}") from None


def status_mark(update: Update) -> dict[str, Any]:
    """What identifies a reported status: its state, timestamp and message (by id if any)."""
    message = update.status_message
    message_id = message.get("messageId") if message else None
    return {
        "state": update.state,
        "timestamp": update.status_timestamp,
        "message": message_id if isinstance(message_id, str) else message,
    }
