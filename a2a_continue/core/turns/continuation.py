"""Continue a task: one follow-up at a time, with the gateway owning the binding."""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import TASK, Update
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.core.access.callers import Caller
from a2a_continue.core.agents.exchange import (
    Forwarded,
    agent_target,
    check_role,
    exchange,
    outgoing,
)
from a2a_continue.core.idempotency.retries import KeyHold
from a2a_continue.core.shapes.messages import ContinueBody, Message, check_send_body
from a2a_continue.core.tasks.claims import release_claim, take_claim
from a2a_continue.core.tasks.reads import require_visible_tasks
from a2a_continue.core.tasks.store import (
    Stored,
    record_claimed_outcome,
    record_new_task,
    record_outcome,
)
from a2a_continue.core.watch.handover import after_send, returns_immediately
from a2a_continue.errors import (
    AgentBadAnswer,
    AgentTimeout,
    AgentUnreachable,
    AppError,
    BadRequest,
    NotFound,
    TaskBusy,
    TaskTerminal,
)
from a2a_continue.obs import metrics
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.gateway import Gateway

log = logging.getLogger(__name__)

# The first and the longest pause between retries of a claim's release.
RELEASE_RETRY_S = 0.25
RELEASE_RETRY_MAX_S = 5.0


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
    return TaskBusy(
        "another follow-up to this task is in flight, or the agent is still working on the "
        "last message; retry once the task settles"
    )


def busy_retry_after_s(poll_base_s: float) -> int:
    """When to retry a busy task: the watcher's first poll pause, rounded up, within 1-5 s.

    A watch notices a settled task at its next poll, and a follow-up in flight usually ends
    within seconds; a longer hint would only delay the retry that succeeds.
    """
    return min(5, max(1, math.ceil(poll_base_s)))


async def claim_task(
    gw: Gateway,
    caller: Caller,
    agent_id: uuid.UUID,
    task_id: str,
    client_context: str | None,
    claim: uuid.UUID,
    key: KeyHold | None = None,
) -> Record:
    """Find the visible task and claim it (with ``key``: first take the key); raise 404, 400
    or 409 otherwise."""
    async with gw.connection() as conn:
        row = await take_claim(
            conn,
            caller,
            agent_id,
            task_id,
            client_context,
            claim,
            timeout_s=gw.settings.agent_timeout_s,
            margin_s=gw.settings.claim_margin_s,
            key=key.param() if key is not None else None,
        )
    if key is not None:
        key.settle(row)
    if row is None or row["row_id"] is None:
        raise NotFound(f"task {task_id} not found")
    if not row["claimed"]:
        error = refusal(row, client_context)
        if isinstance(error, TaskBusy):
            error.headers["Retry-After"] = str(busy_retry_after_s(gw.settings.watch_poll_base_s))
        if isinstance(error, (TaskBusy, TaskTerminal)):
            metrics.followup("busy" if isinstance(error, TaskBusy) else "terminal")
        raise error
    if row["expired_at"] is not None:
        metrics.claim_expired()
        log.warning("task %s: an expired claim was taken over (its holder never answered)", task_id)
    return row


class FollowUp:
    """One claimed follow-up: everything recorded about it is written through here."""

    def __init__(self, gw: Gateway, caller: Caller, row: Record, claim: uuid.UUID) -> None:
        self.gw, self.caller, self.row, self.claim = gw, caller, row, claim
        # The claim's uuid doubles as the message id: one fresh uuid per follow-up.
        self.message_id = str(claim)

    def target(self) -> AgentTarget:
        """Where and how to reach the task's agent."""
        return agent_target(self.gw, self.row)

    def payload(self, body: ContinueBody, *, streaming: bool = False) -> dict[str, Any]:
        """The agent's request: the caller's message with the gateway-owned fields set."""
        send = outgoing(body, self.message_id, self.row["task_id"], self.row["context_id"])
        return protocol.send_request(self.row["protocol_version"], send, streaming=streaming)

    async def failed(self, error: AppError, *, counted: bool = True) -> None:
        """Log a call that did not get an answer (502/504) and release the claim; ``counted``:
        count the follow-up as failed too."""
        data = {"messageId": self.message_id, "reason": error.slug, "detail": error.detail}
        if counted:
            metrics.followup("failed")
        try:
            async with self.gw.connection() as conn:
                await record_outcome(
                    conn,
                    self.row["row_id"],
                    state=None,
                    event="task_continue_failed",
                    actor=self.caller.sub,
                    data=data,
                    claim=self.claim,
                )
        except Exception:
            log.exception("could not log the failed follow-up to task %s", self.row["row_id"])
            await self.release()

    async def answered(self, answer: Update) -> Stored:
        """Store the agent's answer and release the claim; return the state to report.

        Nothing here fails the request: the agent already has the message.
        """
        data: dict[str, Any] = {"messageId": self.message_id}
        metrics.followup("continued")
        if answer.error_code is not None:
            data["error"] = {"code": answer.error_code}
        task = answer.answered
        redirected = task is not None and task.id != self.row["task_id"]
        try:
            if task is not None and redirected:
                return await self._redirected(task, data)
            return await self._continued(task, data)
        except Exception:
            log.exception("could not store the follow-up to task %s", self.row["row_id"])
            if redirected:
                await self.release()
            else:
                # The claim stays: the answer is recorded once the database takes it, and no
                # other follow-up gets in between.
                self.gw.in_background(self._record_later(outcome_of(task), data))
            return Stored(task.state if task else str(self.row["now"]))

    async def _continued(self, task: protocol.AgentTask | None, data: dict[str, Any]) -> Stored:
        outcome = outcome_of(task)

        async def store(conn: Conn, with_event: bool) -> Record:
            return await record_outcome(
                conn,
                self.row["row_id"],
                **outcome,
                event="task_continued",
                actor=self.caller.sub,
                data=data,
                claim=self.claim,
                with_event=with_event,
                whole_row=False,
            )

        async with self.gw.connection() as conn:
            try:
                stored = await store(conn, with_event=True)
            except Exception:
                log.exception("could not log the follow-up to task %s", self.row["row_id"])
                stored = await store(conn, with_event=False)
        return Stored(str(stored["state"]), stored["status_at"])

    async def _redirected(self, task: protocol.AgentTask, data: dict[str, Any]) -> Stored:
        """The agent answered with another task: record it for the caller and link the two."""
        original = self.row["task_id"]
        async with self.gw.connection() as conn, conn.transaction():
            created = await record_new_task(
                conn,
                self.row["agent_id"],
                task,
                self.caller.sub,
                self.row["team_id"],
                {**data, "redirectedFrom": original},
            )
            await record_outcome(
                conn,
                self.row["row_id"],
                state=None,
                event="task_redirected",
                actor=self.caller.sub,
                data={**data, "redirectedTo": task.id},
                claim=self.claim,
            )
        # A redirect to another caller's task leaves it theirs; report the original's state.
        if created is None:
            return Stored(str(self.row["now"]))
        return Stored(str(created["state"]), created["status_at"])

    def claim_ttl(self) -> float:
        """How long a claim lives unless renewed: the agent's timeout plus the margin."""
        return self.target().timeout_s + self.gw.settings.claim_margin_s

    async def release(self) -> None:
        """Give up the claim without recording anything.

        A database that refuses the release gets it again in the background until it takes
        it or the claim has expired: the request has answered, so nothing else frees the
        task sooner, and the claim may be held for the agent's whole timeout.
        """
        if await self._released():
            return
        log.warning("could not release the claim on task %s; retrying", self.row["row_id"])
        self.gw.in_background(self._release_later(time.monotonic() + self.claim_ttl()))

    async def _released(self) -> bool:
        try:
            async with self.gw.connection() as conn:
                await release_claim(conn, self.row["row_id"], self.claim)
        except Exception:
            return False
        return True

    async def _record_later(self, outcome: dict[str, Any], data: dict[str, Any]) -> None:
        """Record an answer whose recording met a database outage, retried while the claim
        lives; then the claim is released as any other."""
        row_id = self.row["row_id"]

        async def recorded() -> bool:
            try:
                async with self.gw.connection() as conn:
                    stored = await record_claimed_outcome(
                        conn, row_id, self.claim, **outcome, event="task_continued",
                        actor=self.caller.sub, data=data, seen_seq=self.row["last_seq"],
                    )  # fmt: skip
            except Exception:
                return False
            if stored is None:
                log.warning("task %s: the claim ended before its answer was recorded", row_id)
            else:
                log.info("recorded the follow-up to task %s after a database failure", row_id)
            return True

        if not await retried(recorded, time.monotonic() + self.claim_ttl()):
            log.warning("task %s: the answer of a follow-up was never recorded", row_id)
            await self.release()

    async def _release_later(self, expires: float) -> None:
        if await retried(self._released, expires):
            log.info("released the claim on task %s", self.row["row_id"])
        else:
            log.warning("the claim on task %s was never released; it expires", self.row["row_id"])


async def retried(attempt: Callable[[], Awaitable[bool]], expires: float) -> bool:
    """Run ``attempt`` after 0.25 s, then again with the pause doubling up to 5 s, until it
    returns True (then True) or the next try would pass ``expires`` (then False)."""
    pause = RELEASE_RETRY_S
    while time.monotonic() + pause < expires:
        await asyncio.sleep(pause)
        if await attempt():
            return True
        pause = min(pause * 2, RELEASE_RETRY_MAX_S)
    return False


def outcome_of(task: protocol.AgentTask | None) -> dict[str, Any]:
    """What an answer changes of the task (nothing but its event without a task)."""
    if task is None:
        return {"state": None}
    return {
        "state": task.state,
        "status_message": task.status_message,
        "artifacts": task.artifacts or None,
    }


async def begin_follow_up(
    gw: Gateway,
    caller: Caller,
    agent_id: uuid.UUID,
    task_id: str,
    body: ContinueBody,
    key: KeyHold | None = None,
) -> FollowUp:
    """Check the body and the gateway-owned fields, then claim the task (400/404/409/422);
    with ``key``, take the Idempotency-Key in the same statement."""
    check_send_body(body)
    check_role(body.message)
    check_owned_ids(body.message, task_id)
    if body.message is not None and body.message.reference_task_ids:
        async with gw.connection() as conn:
            await require_visible_tasks(conn, caller, agent_id, body.message.reference_task_ids)
    client_context = body.message.context_id if body.message else None
    claim = uuid.uuid4()
    row = await claim_task(gw, caller, agent_id, task_id, client_context, claim, key)
    return FollowUp(gw, caller, row, claim)


async def continue_task(
    gw: Gateway,
    caller: Caller,
    agent_id: uuid.UUID,
    task_id: str,
    body: ContinueBody,
    key: KeyHold | None = None,
) -> Forwarded:
    """Send a follow-up to a task, one at a time, and record what came of it."""
    follow_up = await begin_follow_up(gw, caller, agent_id, task_id, body, key)
    return await send_follow_up(gw, follow_up, body)


async def send_follow_up(gw: Gateway, follow_up: FollowUp, body: ContinueBody) -> Forwarded:
    """Send a claimed follow-up as one blocking call and record the answer."""
    try:
        reply, answer = await exchange(gw, follow_up.target(), follow_up.payload(body))
    except (AgentTimeout, AgentUnreachable, AgentBadAnswer) as error:
        await follow_up.failed(error)
        raise
    except BaseException:
        await follow_up.release()
        raise
    stored = await follow_up.answered(answer)
    if answer.kind == TASK and answer.task_id == follow_up.row["task_id"]:
        await after_send(gw, follow_up.row["agent_id"], answer, returns_immediately(body))
    return Forwarded(reply.raw, stored.state, answer, stored.status_at)
