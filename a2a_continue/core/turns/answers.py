"""`?answer=task`: a start or a follow-up answered with the stored task in the gateway's shape
(§6), the same for agents of either version, instead of the agent's body.

The task shown is the one the agent's answer names (a start's; a follow-up's own, or the task
it was redirected to when that is the caller's), else the follow-up's task (an answer that was
a message). An answer with nothing to show is a problem made of the agent's own answer: a
JSON-RPC error (`agent-error`), a start answered with a message (`agent-started-no-task`).
Both are the agent's answer, kept for an Idempotency-Key like a 200.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from a2a_continue.a2a.answers import ERROR
from a2a_continue.core.access.callers import Caller
from a2a_continue.core.agents.exchange import Forwarded
from a2a_continue.core.tasks.models import TaskOut
from a2a_continue.core.tasks.reads import find_task, task_out
from a2a_continue.errors import AgentError, AgentStartedNoTask, InvalidQuery, NotFound
from a2a_continue.runtime.gateway import Gateway

AGENT, TASK = "agent", "task"


def answer_param(params: Mapping[str, str]) -> str:
    """Read ``answer``: ``agent`` (the default, the agent's body) or ``task``; else 422."""
    value = params.get("answer", AGENT)
    if value not in (AGENT, TASK):
        raise InvalidQuery("answer", f"must be 'agent' or 'task', got {value!r}")
    return value


def key_variant(mode: str) -> str:
    """What an Idempotency-Key's fingerprint adds for ``mode``: nothing for the agent's body (the
    default), the mode otherwise, so that one key stands for one way of answering."""
    return "" if mode == AGENT else mode


async def task_answer(
    gw: Gateway, caller: Caller, agent_id: uuid.UUID, sent: Forwarded, task_id: str | None
) -> TaskOut:
    """The stored task a send reached (``task_id``: a follow-up's), or the agent's refusal."""
    answer = sent.answer
    if answer.kind == ERROR:
        raise AgentError(
            f"the agent answered with error {answer.error_code}: {answer.error_message}",
            agentError={"code": answer.error_code, "message": answer.error_message},
        )
    shown = [tid for tid in dict.fromkeys((answer.task_id, task_id)) if tid is not None]
    if not shown:
        raise AgentStartedNoTask(
            "the agent answered with a message and started no task (`agentMessage`); send"
            " without answer=task to get the agent's answer as it came",
            agentMessage=answer.raw,
        )
    async with gw.connection() as conn:
        for candidate in shown:
            try:
                return task_out(await find_task(conn, caller, agent_id, candidate))
            except NotFound:
                continue  # a redirect to a task of another caller: the follow-up's own
    raise NotFound(f"task {shown[-1]} not found")
