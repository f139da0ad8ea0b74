"""Start a task with an agent, and cancel one."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import msgspec

from a2a_continue.a2a import protocol
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.core.access.callers import Caller
from a2a_continue.core.agents.exchange import (
    Forwarded,
    agent_target,
    check_role,
    exchange,
    outgoing,
)
from a2a_continue.core.agents.registry import can_push, visible_agent_row
from a2a_continue.core.shapes.messages import StartBody, check_send_body
from a2a_continue.core.shapes.wire import decode_body
from a2a_continue.core.tasks.contexts import join_context
from a2a_continue.core.tasks.models import TaskOut
from a2a_continue.core.tasks.reads import find_task, require_visible_tasks, task_out
from a2a_continue.core.tasks.store import record_new_task, record_outcome
from a2a_continue.core.watch.handover import after_send, returns_immediately
from a2a_continue.core.watch.push_in import bind_answer, end_configs, offer_inline
from a2a_continue.errors import (
    AgentBadAnswer,
    BadRequest,
    DatabaseUnavailable,
    Forbidden,
    Invalid,
    NotCancelable,
    TaskTerminal,
)
from a2a_continue.obs.telemetry import note_task
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.gateway import Gateway

log = logging.getLogger(__name__)

NOT_CANCELABLE = -32002


def decode_start(raw: bytes, agent_id: uuid.UUID) -> StartBody:
    """Decode a start's body (422); a `taskId` beside the message is shown where it belongs."""
    try:
        return decode_body(raw, StartBody)
    except Invalid as error:
        problem = error.extra["errors"][0]
        if (problem["loc"], problem["msg"]) != ("$", "Object contains unknown field `taskId`"):
            raise
        task_id = msgspec.json.decode(raw).get("taskId")
        named = isinstance(task_id, str) and task_id
        url = f"/v1/a2a/{agent_id}/tasks/{quote(task_id, safe='') if named else '{taskId}'}"
        msg = (
            "a start names no task (unknown field `taskId`): to continue a task, POST the"
            f" message to {url}/messages"
        )
        refused = Invalid([{"loc": "$.taskId", "msg": msg}])
        refused.extra["continueUrl"] = url + "/messages"
        raise refused from None


def check_start(agent_id: uuid.UUID, caller: Caller, body: StartBody) -> None:
    """A start names no task, speaks as the user, and may name only the caller's teams."""
    check_send_body(body)
    if body.message is not None and body.message.task_id is not None:
        url = f"/v1/a2a/{agent_id}/tasks/{body.message.task_id}/messages"
        raise BadRequest(
            f"a message with a taskId continues a task: POST it to {url}", continueUrl=url
        )
    check_role(body.message)
    if body.team_id is not None and body.team_id not in caller.teams:
        raise Forbidden(f"you are not a member of team {body.team_id!r}")


@dataclass(frozen=True, slots=True)
class Start:
    """A checked start: the visible agent, how to reach it, and the message id the gateway owns."""

    gw: Gateway
    caller: Caller
    agent: Record
    target: AgentTarget
    body: StartBody
    message_id: str

    def payload(
        self, *, streaming: bool = False, push: protocol.PushTarget | None = None
    ) -> dict[str, Any]:
        """The agent's request: the caller's message with the gateway-owned fields set (and
        the gateway's own push config, when it gives one inline)."""
        context_id = self.body.message.context_id if self.body.message else None
        send = outgoing(self.body, self.message_id, None, context_id)
        if push is not None:
            send = dataclasses.replace(send, push=push)
        return protocol.send_request(self.target.protocol_version, send, streaming=streaming)

    async def push_in(self) -> protocol.PushTarget | None:
        """The push config to give inline (SPEC §19): for a ``returnImmediately`` start of an
        agent that pushes, whose task the gateway will follow; else None."""
        if not (can_push(self.agent) and returns_immediately(self.body)):
            return None
        agent_id = self.agent["agent_id"]
        return await offer_inline(self.gw, agent_id, self.target.protocol_version)

    def claim_ttl(self) -> float:
        """How long the claim of a streamed start lives unless renewed (as a follow-up's)."""
        return self.target.timeout_s + self.gw.settings.claim_margin_s

    async def store(self, task: protocol.AgentTask, claim: uuid.UUID | None = None) -> Record:
        """Record the task the agent started for the caller (its `task_created`); with
        ``claim``, claim it in the same statement. Return its row's id, state and status time."""
        agent_id = self.agent["agent_id"]
        note_task(agent_id, task.id)
        try:
            async with self.gw.connection() as conn:
                row = await record_new_task(
                    conn,
                    agent_id,
                    task,
                    self.caller.sub,
                    self.body.team_id,
                    {"messageId": self.message_id},
                    claim,
                    self.claim_ttl(),
                )
        except Exception:
            log.exception("agent %s started task %s but it could not be stored", agent_id, task.id)
            raise DatabaseUnavailable(
                "the agent answered but the task could not be stored"
            ) from None
        if row is None:
            raise AgentBadAnswer(f"the agent answered with task {task.id!r} of another caller")
        return row


async def begin_start(gw: Gateway, caller: Caller, agent_id: uuid.UUID, body: StartBody) -> Start:
    """Check a start's body and find the visible agent (400/403/404/422)."""
    check_start(agent_id, caller, body)
    async with gw.connection() as conn:
        agent = await visible_agent_row(conn, caller, agent_id)
        await check_links(conn, caller, agent_id, body)
    target = agent_target(gw, agent)
    return Start(gw, caller, agent, target, body, str(uuid.uuid4()))


async def check_links(conn: Conn, caller: Caller, agent_id: uuid.UUID, body: StartBody) -> None:
    """A start's message may name only what the caller can see (404 otherwise): the tasks it
    references, and its context, unless that context is new to the agent (then it is theirs)."""
    message = body.message
    if message is None:
        return
    if message.reference_task_ids:
        await require_visible_tasks(conn, caller, agent_id, message.reference_task_ids)
    if message.context_id is not None:
        await join_context(conn, caller, agent_id, message.context_id, body.team_id)


async def start_task(
    gw: Gateway, caller: Caller, agent_id: uuid.UUID, body: StartBody
) -> Forwarded:
    """Send a first message to an agent; store the task it starts for the caller."""
    return await send_start(await begin_start(gw, caller, agent_id, body))


async def send_start(start: Start) -> Forwarded:
    """Send a checked start as one blocking call; store the task it starts for the caller."""
    push = await start.push_in()
    reply, answer = await exchange(start.gw, start.target, start.payload(push=push))
    task = answer.answered
    if task is None:
        return Forwarded(reply.raw, None, answer)
    row = await start.store(task)
    if push is not None:
        await bind_answer(start.gw, push, row["id"], task.id)
        if protocol.is_terminal_task_state(row["state"]):  # nothing to follow: drop it
            start.gw.in_background(end_configs(start.gw, start.target, row["id"]))
    await after_send(start.gw, start.agent["agent_id"], answer, returns_immediately(start.body))
    return Forwarded(reply.raw, row["state"], answer, row["status_at"])


async def cancel_task(gw: Gateway, caller: Caller, agent_id: uuid.UUID, task_id: str) -> TaskOut:
    """Ask the agent to cancel a task and store the state it reports."""
    return task_out(await cancel_task_row(gw, caller, agent_id, task_id))


async def cancel_task_row(gw: Gateway, caller: Caller, agent_id: uuid.UUID, task_id: str) -> Record:
    """Cancel as ``cancel_task`` does; return the stored task's row."""
    async with gw.connection() as conn:
        row = await find_task(conn, caller, agent_id, task_id)
    if protocol.is_terminal_task_state(row["state"]):
        raise TaskTerminal(row["state"], "canceled")
    target = agent_target(gw, row)
    payload = protocol.build_cancel_request(target.protocol_version, protocol.new_rpc_id(), task_id)
    _, answer = await exchange(gw, target, payload)
    if answer.error_code == NOT_CANCELABLE:
        raise NotCancelable(f"the agent refused to cancel the task: {answer.error_message}")
    if answer.error_code is not None:
        raise AgentBadAnswer(
            f"the agent answered the cancel with error {answer.error_code}: {answer.error_message}",
            agentError={"code": answer.error_code, "message": answer.error_message},
        )
    task = answer.answered
    if task is None:
        raise AgentBadAnswer("the agent answered the cancel without a task")
    if task.id != row["task_id"]:
        raise AgentBadAnswer(
            f"the agent answered the cancel of task {row['task_id']!r} with task {task.id!r};"
            " the task is left as it was"
        )
    async with gw.connection() as conn:
        stored = await record_outcome(
            conn,
            row["row_id"],
            state=task.state,
            status_message=task.status_message,
            artifacts=task.artifacts or None,
            event="task_canceled",
            actor=caller.sub,
            data={},
        )
    return stored
