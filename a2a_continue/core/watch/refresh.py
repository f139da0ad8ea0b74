"""``GET …/tasks/{task_id}?refresh=true``: ask the agent now, record any change, return the task."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import ERROR, TASK
from a2a_continue.core.access.callers import Caller
from a2a_continue.core.agents.exchange import target_of
from a2a_continue.core.agents.registry import can_push
from a2a_continue.core.tasks.models import TaskOut
from a2a_continue.core.tasks.reads import find_task, task_out
from a2a_continue.core.tasks.updates import record_update
from a2a_continue.core.watch.handover import LIVE_STATES
from a2a_continue.core.watch.push_in import offer
from a2a_continue.core.watch.snapshots import ask_agent
from a2a_continue.errors import AgentBadAnswer, InvalidQuery
from a2a_continue.runtime.gateway import Gateway

_FLAGS = {"true": True, "1": True, "false": False, "0": False}


def refresh_param(params: Mapping[str, str]) -> bool:
    """Read ``refresh`` (true/false, 1/0; default false)."""
    raw = params.get("refresh")
    if raw is None:
        return False
    flag = _FLAGS.get(raw.strip().lower())
    if flag is None:
        msg = f"must be true or false, got {raw!r}"
        raise InvalidQuery("refresh", msg)
    return flag


async def refresh_task(gw: Gateway, caller: Caller, agent_id: uuid.UUID, task_id: str) -> TaskOut:
    """Ask the agent for a visible task (GetTask), store what changed, return the stored task.

    A terminal task cannot change any more (§6), so it is returned without asking.
    """
    async with gw.connection() as conn:
        row = await find_task(conn, caller, agent_id, task_id)
    if protocol.is_terminal_task_state(row["state"]):
        return task_out(row)
    target = target_of(row, gw.sealer, gw.settings.agent_timeout_s)
    update = await ask_agent(gw, target, task_id)
    if update.kind == ERROR:
        raise AgentBadAnswer(
            f"the agent answered GetTask with error {update.error_code}: {update.error_message}",
            agentError={"code": update.error_code, "message": update.error_message},
        )
    if update.kind != TASK or update.task_id != task_id:
        raise AgentBadAnswer(f"the agent answered GetTask without task {task_id!r}")
    async with gw.connection() as conn:
        applied = await record_update(
            conn, row["row_id"], update, source="refresh", actor=caller.sub
        )
    if can_push(row) and applied.state in LIVE_STATES:
        # Followed from now on by the agent's pushes (SPEC §19), not only by polls.
        gw.in_background(offer(gw, target, row["agent_id"], row["row_id"], task_id))
    return task_out(applied.row)
