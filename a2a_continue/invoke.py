"""The use cases that reach an agent: start a task, continue it, cancel it."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from a2a_continue import protocol
from a2a_continue.agents import target_of
from a2a_continue.auth import AGENT_VISIBLE, TASK_VISIBLE, Caller
from a2a_continue.db import Conn, Record
from a2a_continue.downstream import AgentReply, AgentTarget, post_rpc
from a2a_continue.errors import (
    AgentBadAnswer,
    AgentTimeout,
    AgentUnreachable,
    AppError,
    BadRequest,
    DatabaseUnavailable,
    Forbidden,
    NotCancelable,
    NotFound,
    TaskBusy,
    TaskTerminal,
)
from a2a_continue.gateway import Gateway
from a2a_continue.models import ContinueBody, Message, StartBody, TaskOut, check_send_body
from a2a_continue.tasks import (
    TERMINAL_SQL,
    find_task,
    record_new_task,
    record_outcome,
    task_out,
)

log = logging.getLogger(__name__)

NOT_CANCELABLE = -32002


@dataclass(frozen=True, slots=True)
class Forwarded:
    """The agent's answer, passed back as it came, and the task state after the call."""

    raw: bytes
    state: str | None


# ---- the message a caller sends -----------------------------------------------------------


def check_role(message: Message | None) -> None:
    """The gateway always speaks as the user; a client may only say so too."""
    if message is not None and message.role is not None and message.role not in protocol.USER_ROLES:
        raise BadRequest(f"role must be 'user' or 'ROLE_USER', got {message.role!r}")


def outgoing_message(
    body: ContinueBody, version: str, task_id: str | None, context_id: str | None
) -> tuple[str, dict[str, Any]]:
    """Build the agent-shaped message with the gateway's own messageId; return both."""
    message_id = str(uuid.uuid4())
    message = body.message
    parts = [{"text": body.text}] if message is None else [protocol_part(p) for p in message.parts]
    built = protocol.build_message(
        version,
        message_id=message_id,
        task_id=task_id,
        context_id=context_id,
        parts=parts,
        metadata=message.metadata if message else None,
        extensions=message.extensions if message else None,
        reference_task_ids=message.reference_task_ids if message else None,
    )
    return message_id, built


def protocol_part(part: Any) -> dict[str, Any]:
    """Turn a decoded part back into its JSON object, dropping absent fields."""
    raw = msgspec.to_builtins(part)
    if isinstance(raw.get("file"), dict):
        raw["file"] = {k: v for k, v in raw["file"].items() if v is not None}
    # `data` may itself be JSON null; absent fields are None (UNSET data is already gone).
    return {k: v for k, v in raw.items() if v is not None or k == "data"}


def send_payload(body: ContinueBody, version: str, message: dict[str, Any]) -> dict[str, Any]:
    """Wrap the message in the version's send request."""
    config = None
    if body.configuration is not None:
        config = {
            "historyLength": body.configuration.history_length,
            "acceptedOutputModes": body.configuration.accepted_output_modes,
        }
    return protocol.build_send_request(
        version, protocol.new_rpc_id(), message, config, body.metadata
    )


def read_answer(version: str, reply: AgentReply) -> protocol.AgentAnswer:
    """Parse the agent's JSON-RPC answer; an unusable one is a 502."""
    try:
        return protocol.parse_answer(version, reply.body)
    except protocol.ProtocolError as exc:
        raise AgentBadAnswer(f"the agent's answer is not an A2A result: {exc}") from None


# ---- start --------------------------------------------------------------------------------


async def start_task(
    gw: Gateway, caller: Caller, agent_id: uuid.UUID, body: StartBody
) -> Forwarded:
    """Send a first message to an agent; store the task it starts for the caller."""
    check_send_body(body)
    if body.message is not None and body.message.task_id is not None:
        url = f"/v1/a2a/{agent_id}/tasks/{body.message.task_id}/messages"
        raise BadRequest(
            f"a message with a taskId continues a task: POST it to {url}", continueUrl=url
        )
    check_role(body.message)
    if body.team_id is not None and body.team_id not in caller.teams:
        raise Forbidden(f"you are not a member of team {body.team_id!r}")
    async with gw.connection() as conn:
        agent = await conn.fetchrow(
            f"""SELECT a.id AS agent_id, a.endpoint_url, a.protocol_version, a.auth_sealed,
                       a.timeout_seconds
                FROM a2a_agents a WHERE a.id = $4 AND {AGENT_VISIBLE}""",
            *caller.scope_args(),
            agent_id,
        )
    if agent is None:
        raise NotFound(f"agent {agent_id} not found")
    target = target_of(agent, gw.sealer, gw.settings.agent_timeout_s)
    context_id = body.message.context_id if body.message else None
    message_id, message = outgoing_message(body, target.protocol_version, None, context_id)
    reply = await _post(gw, target, send_payload(body, target.protocol_version, message))
    answer = read_answer(target.protocol_version, reply)
    if answer.task is None:
        return Forwarded(reply.raw, None)
    try:
        async with gw.connection() as conn:
            state = await record_new_task(
                conn, agent_id, answer.task, caller.sub, body.team_id, {"messageId": message_id}
            )
    except Exception:
        log.exception(
            "agent %s started task %s but it could not be stored", agent_id, answer.task.id
        )
        raise DatabaseUnavailable("the agent answered but the task could not be stored") from None
    if state is None:
        raise AgentBadAnswer(f"the agent answered with task {answer.task.id!r} of another caller")
    return Forwarded(reply.raw, state)


async def _post(gw: Gateway, target: AgentTarget, payload: dict[str, Any]) -> AgentReply:
    return await post_rpc(gw.session, target, payload, gw.settings.max_agent_response_bytes)


# ---- continue -----------------------------------------------------------------------------

# Find the visible task and, in the same statement, claim it for one follow-up: the claim
# is taken only when the task is not terminal, its context matches and no live claim holds it.
CLAIM_TASK = f"""
WITH target AS (
    SELECT t.id AS row_id, t.task_id, t.state, t.context_id, t.team_id, a.id AS agent_id,
           a.endpoint_url, a.protocol_version, a.auth_sealed, a.timeout_seconds
    FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
    WHERE t.agent_id = $4 AND t.task_id = $5 AND {TASK_VISIBLE}
), claimed AS (
    UPDATE a2a_tasks t
    SET claim_token = $6,
        claim_expires_at = now() + make_interval(secs => COALESCE(target.timeout_seconds, $8) + $9)
    FROM target
    WHERE t.id = target.row_id
      AND t.state NOT IN {TERMINAL_SQL}
      AND ($7::text IS NULL OR t.context_id = $7)
      AND (t.claim_expires_at IS NULL OR t.claim_expires_at < now())
    RETURNING t.id, t.state
)
SELECT target.*, claimed.id IS NOT NULL AS claimed, COALESCE(claimed.state, target.state) AS now
FROM target LEFT JOIN claimed ON claimed.id = target.row_id
"""


def check_owned_ids(message: Message | None, task_id: str) -> None:
    """A client taskId must name the task of the path."""
    if message is not None and message.task_id is not None and message.task_id != task_id:
        raise BadRequest(
            f"message.taskId {message.task_id!r} differs from the task in the path {task_id!r}"
        )


def refusal(row: Record, client_context: str | None) -> AppError:
    """Say why a follow-up could not claim the task."""
    if client_context is not None and client_context != row["context_id"]:
        if row["context_id"] is None:
            return BadRequest("this task has no contextId; do not send one")
        return BadRequest(
            f"message.contextId {client_context!r} differs from the task's {row['context_id']!r}"
        )
    if protocol.is_terminal_task_state(row["now"]):
        return TaskTerminal(row["now"], "continued")
    return TaskBusy("another follow-up to this task is in flight; retry when it has answered")


async def claim_task(
    gw: Gateway,
    caller: Caller,
    agent_id: uuid.UUID,
    task_id: str,
    client_context: str | None,
    claim: uuid.UUID,
) -> Record:
    """Find the visible task and claim it; raise 404, 400 or 409 otherwise."""
    async with gw.connection() as conn:
        row = await conn.fetchrow(
            CLAIM_TASK,
            *caller.scope_args(),
            agent_id,
            task_id,
            claim,
            client_context,
            gw.settings.agent_timeout_s,
            gw.settings.claim_margin_s,
        )
    if row is None:
        raise NotFound(f"task {task_id} not found")
    if not row["claimed"]:
        raise refusal(row, client_context)
    return row


async def continue_task(
    gw: Gateway, caller: Caller, agent_id: uuid.UUID, task_id: str, body: ContinueBody
) -> Forwarded:
    """Send a follow-up to a task, one at a time, and record what came of it."""
    check_send_body(body)
    check_role(body.message)
    check_owned_ids(body.message, task_id)
    client_context = body.message.context_id if body.message else None
    claim = uuid.uuid4()
    row = await claim_task(gw, caller, agent_id, task_id, client_context, claim)
    settled = False
    try:
        target = target_of(row, gw.sealer, gw.settings.agent_timeout_s)
        version = target.protocol_version
        message_id, message = outgoing_message(body, version, task_id, row["context_id"])
        try:
            reply = await _post(gw, target, send_payload(body, version, message))
            answer = read_answer(version, reply)
        except (AgentTimeout, AgentUnreachable, AgentBadAnswer) as error:
            settled = True
            await _record_failure(gw, row, claim, caller, message_id, error)
            raise
        settled = True
        state = await _record_answer(gw, row, claim, caller, agent_id, message_id, answer)
        return Forwarded(reply.raw, state)
    finally:
        if not settled:
            await _release(gw, row["row_id"], claim)


async def _record_failure(
    gw: Gateway,
    row: Record,
    claim: uuid.UUID,
    caller: Caller,
    message_id: str,
    error: AppError,
) -> None:
    data = {"messageId": message_id, "reason": error.slug, "detail": error.detail}
    try:
        async with gw.connection() as conn:
            await record_outcome(
                conn,
                row["row_id"],
                state=None,
                event="task_continue_failed",
                actor=caller.sub,
                data=data,
                claim=claim,
            )
    except Exception:
        log.exception("could not record the failed follow-up to task %s", row["row_id"])
        await _release(gw, row["row_id"], claim)


async def _record_answer(
    gw: Gateway,
    row: Record,
    claim: uuid.UUID,
    caller: Caller,
    agent_id: uuid.UUID,
    message_id: str,
    answer: protocol.AgentAnswer,
) -> str:
    """Store the agent's answer to a follow-up; return the state the caller is told."""
    task = answer.task
    data: dict[str, Any] = {"messageId": message_id}
    if answer.error_code is not None:
        data["error"] = {"code": answer.error_code}
    if task is not None and task.id != _task_id_of(row):
        return await _record_redirect(gw, row, claim, caller, agent_id, data, task)
    state = task.state if task else None
    message = task.status_message if task else None
    artifacts = (task.artifacts or None) if task else None

    async def store(conn: Conn, with_event: bool) -> Record:
        return await record_outcome(
            conn,
            row["row_id"],
            state=state,
            status_message=message,
            artifacts=artifacts,
            event="task_continued",
            actor=caller.sub,
            data=data,
            claim=claim,
            with_event=with_event,
        )

    async with gw.connection() as conn:
        try:
            stored = await store(conn, True)
        except Exception:
            log.exception(
                "could not log the follow-up to task %s; storing its state", row["row_id"]
            )
            try:
                stored = await store(conn, False)
            except Exception:
                log.exception("could not store the follow-up to task %s", row["row_id"])
                return state or str(row["now"])
    return str(stored["state"])


def _task_id_of(row: Record) -> str:
    return str(row["task_id"])


async def _record_redirect(
    gw: Gateway,
    row: Record,
    claim: uuid.UUID,
    caller: Caller,
    agent_id: uuid.UUID,
    data: dict[str, Any],
    task: protocol.AgentTask,
) -> str:
    """The agent answered with another task: record it for the caller and link the two."""
    original = _task_id_of(row)
    async with gw.connection() as conn:
        state = await record_new_task(
            conn, agent_id, task, caller.sub, row["team_id"], {**data, "redirectedFrom": original}
        )
        await record_outcome(
            conn,
            row["row_id"],
            state=None,
            event="task_redirected",
            actor=caller.sub,
            data={**data, "redirectedTo": task.id},
            claim=claim,
        )
    # A redirect to another caller's task leaves that task theirs; report the original's state.
    return state if state is not None else str(row["now"])


async def _release(gw: Gateway, row_id: uuid.UUID, claim: uuid.UUID) -> None:
    """Give up a claim without recording anything (the follow-up never reached the agent)."""
    try:
        async with gw.connection() as conn:
            await conn.execute(
                "UPDATE a2a_tasks SET claim_token = NULL, claim_expires_at = NULL"
                " WHERE id = $1 AND claim_token = $2",
                row_id,
                claim,
            )
    except Exception:
        log.exception("could not release the claim on task %s; it will expire", row_id)


# ---- cancel -------------------------------------------------------------------------------


async def cancel_task(gw: Gateway, caller: Caller, agent_id: uuid.UUID, task_id: str) -> TaskOut:
    """Ask the agent to cancel a task and store the state it reports."""
    async with gw.connection() as conn:
        row = await find_task(conn, caller, agent_id, task_id)
    if protocol.is_terminal_task_state(row["state"]):
        raise TaskTerminal(row["state"], "canceled")
    target = target_of(row, gw.sealer, gw.settings.agent_timeout_s)
    payload = protocol.build_cancel_request(target.protocol_version, protocol.new_rpc_id(), task_id)
    answer = read_answer(target.protocol_version, await _post(gw, target, payload))
    if answer.error_code == NOT_CANCELABLE:
        raise NotCancelable(f"the agent refused to cancel the task: {answer.error_message}")
    if answer.error_code is not None:
        raise AgentBadAnswer(
            f"the agent answered the cancel with error {answer.error_code}: {answer.error_message}",
            agentError={"code": answer.error_code, "message": answer.error_message},
        )
    task = answer.task
    if task is None:
        raise AgentBadAnswer("the agent answered the cancel without a task")
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
    return task_out(stored)
