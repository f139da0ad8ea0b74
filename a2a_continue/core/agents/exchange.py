"""What the gateway sends an agent for a caller, and how it reads the answer."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec

from a2a_continue.a2a import answers, protocol
from a2a_continue.a2a.agent_stream import Frame, stream_rpc
from a2a_continue.a2a.downstream import AgentReply, AgentTarget, post_rpc
from a2a_continue.core.shapes.messages import ContinueBody, Message, Part
from a2a_continue.errors import AgentBadAnswer, AgentTimeout, AgentUnreachable, BadRequest
from a2a_continue.obs import metrics
from a2a_continue.obs.telemetry import agent_span, upstream
from a2a_continue.runtime.db import Record
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.secrets import Sealer


@dataclass(frozen=True, slots=True)
class Forwarded:
    """The agent's answer, passed back as it came, the task state after the call, and what
    the answer was read as (for whoever passes it on in another shape)."""

    raw: bytes
    state: str | None
    answer: answers.Update
    # The time of the stored task's status after the call (None: no task stored, or unknown).
    status_at: dt.datetime | None = None


def check_role(message: Message | None) -> None:
    """The gateway always speaks as the user; a client may only say so too."""
    if message is not None and message.role is not None and message.role not in protocol.USER_ROLES:
        raise BadRequest(f"role must be 'user' or 'ROLE_USER', got {message.role!r}")


def wire_part(part: Part) -> dict[str, Any]:
    """Turn a decoded part back into its JSON object, dropping absent fields."""
    raw = msgspec.to_builtins(part)
    if isinstance(raw.get("file"), dict):
        raw["file"] = {k: v for k, v in raw["file"].items() if v is not None}
    # `data` may itself be JSON null; absent fields are None (UNSET data is already gone).
    return {k: v for k, v in raw.items() if v is not None or k == "data"}


def outgoing(
    body: ContinueBody, message_id: str, task_id: str | None, context_id: str | None
) -> protocol.Outgoing:
    """What to send the agent: the caller's message and settings, with the gateway's own id,
    task and context (the wire layer gives it the agent's version's shape)."""
    message, config = body.message, body.configuration
    parts = [{"text": body.text}] if message is None else [wire_part(p) for p in message.parts]
    return protocol.Outgoing(
        message_id=message_id,
        task_id=task_id,
        context_id=context_id,
        parts=parts,
        metadata=message.metadata if message else None,
        extensions=message.extensions if message else None,
        reference_task_ids=message.reference_task_ids if message else None,
        history_length=config.history_length if config else None,
        accepted_output_modes=config.accepted_output_modes if config else None,
        return_immediately=config.return_immediately if config else None,
        request_metadata=body.metadata,
    )


async def exchange(
    gw: Gateway, target: AgentTarget, payload: dict[str, Any]
) -> tuple[AgentReply, answers.Update]:
    """POST the payload to the agent and read its answer, once; an unusable one is a 502."""
    method = str(payload.get("method"))
    began = time.perf_counter()
    outcome: str | None = None
    try:
        reply = await _post(gw, target, payload, method)
        try:
            answer = answers.read(reply.body, target.protocol_version)
        except protocol.ProtocolError as exc:
            raise AgentBadAnswer(f"the agent's answer is not an A2A result: {exc}") from None
        outcome = "ok" if answer.kind != answers.ERROR else "rpc-error"
        return reply, answer
    except (AgentTimeout, AgentUnreachable, AgentBadAnswer) as error:
        outcome = failure_outcome(error)
        raise
    finally:
        if outcome is not None:
            seconds = time.perf_counter() - began
            metrics.agent_call(method, outcome, seconds)
            upstream(outcome, seconds)


async def _post(
    gw: Gateway, target: AgentTarget, payload: dict[str, Any], method: str
) -> AgentReply:
    with (
        gw.slots.slot(target.agent_id or target.endpoint_url),
        agent_span(method, target.endpoint_url),
    ):
        return await post_rpc(
            gw.session,
            target,
            payload,
            gw.settings.max_agent_response_bytes,
            gw.settings.agent_networks,
        )


async def call_agent(gw: Gateway, target: AgentTarget, payload: dict[str, Any]) -> dict[str, Any]:
    """POST a request whose answer is no task (a push config's): return the JSON-RPC
    answer's ``result`` or ``error`` object, as ``{"result": …}`` or ``{"error": …}``."""
    method = str(payload.get("method"))
    began = time.perf_counter()
    outcome: str | None = None
    try:
        reply = await _post(gw, target, payload, method)
        body = reply.body
        if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
            raise AgentBadAnswer("the agent's answer is not JSON-RPC 2.0")
        if isinstance(body.get("error"), dict):
            outcome = "rpc-error"
            return {"error": body["error"]}
        if "result" not in body:
            raise AgentBadAnswer("the agent's answer has neither 'result' nor 'error'")
        outcome = "ok"
        return {"result": body["result"]}
    except (AgentTimeout, AgentUnreachable, AgentBadAnswer) as error:
        outcome = failure_outcome(error)
        raise
    finally:
        if outcome is not None:
            metrics.agent_call(method, outcome, time.perf_counter() - began)


def failure_outcome(error: BaseException) -> str | None:
    """The agent-call outcome of a failed call (§11.2), or None for a failure not the agent's."""
    if isinstance(error, (AgentTimeout, TimeoutError)):
        return "timeout"
    if isinstance(error, AgentUnreachable):
        return "unreachable"
    if isinstance(error, (AgentBadAnswer, protocol.ProtocolError)):
        return "bad-answer"
    return None


# One frame of an agent's stream: its bytes and decoded value, and what it was read as.
ReadFrame = tuple[Frame, answers.Update]


class _Frames:
    """The frames of an agent's stream, each read once, noting whether one was a JSON-RPC error.

    A frame that is not an A2A result raises ProtocolError (its caller says what it ends).
    """

    def __init__(self, frames: AsyncIterator[Frame], version: str) -> None:
        self.frames = frames
        self.version = version
        self.rpc_error = False

    def __aiter__(self) -> _Frames:
        return self

    async def __anext__(self) -> ReadFrame:
        frame = await anext(self.frames)
        update = answers.read(frame.body, self.version, frame=True)
        self.rpc_error = self.rpc_error or update.kind == answers.ERROR
        return frame, update

    def outcome(self) -> str:
        """How the agent answered, as far as its frames tell."""
        return "rpc-error" if self.rpc_error else "ok"


@contextlib.asynccontextmanager
async def exchange_stream(
    gw: Gateway, target: AgentTarget, payload: dict[str, Any]
) -> AsyncIterator[AsyncIterator[ReadFrame]]:
    """Open the agent's stream for ``payload`` and yield its frames, each read once (one that is
    not an A2A result raises ProtocolError); count the call once, when the block ends: by the
    error that ended it, else by its frames (``rpc-error`` or ``ok``).

    An error of the gateway's own (a frame it could not store) leaves the outcome to the
    frames; a cancelled block (shutdown) is not counted, like a cancelled blocking call.
    """
    method = str(payload.get("method"))
    began = time.perf_counter()
    max_bytes = gw.settings.max_agent_response_bytes
    opened = stream_rpc(gw.session, target, payload, max_bytes, gw.settings.agent_networks)
    async with contextlib.aclosing(opened) as raw:
        frames = _Frames(raw, target.protocol_version)
        try:
            yield frames
        except Exception as error:
            outcome = failure_outcome(error) or frames.outcome()
            metrics.agent_call(method, outcome, time.perf_counter() - began)
            raise
        metrics.agent_call(method, frames.outcome(), time.perf_counter() - began)


# Agent targets kept per process; a changed row (new URL, credentials…) makes a new key.
TARGETS_KEPT = 1024


def target_of(row: Record, sealer: Sealer, default_timeout: float) -> AgentTarget:
    """Build the downstream target of an agent row (opening its credentials)."""
    sealed = row["auth_sealed"]
    auth = sealer.open(sealed, row["agent_id"].bytes) if sealed is not None else None
    return AgentTarget(
        endpoint_url=row["endpoint_url"],
        protocol_version=row["protocol_version"],
        timeout_s=row["timeout_seconds"] or default_timeout,
        auth=auth if isinstance(auth, dict) else None,
        agent_id=row["agent_id"],
    )


def agent_target(gw: Gateway, row: Record) -> AgentTarget:
    """The downstream target of an agent row; credentials opened and headers built once."""
    key = (
        row["agent_id"],
        row["endpoint_url"],
        row["protocol_version"],
        row["timeout_seconds"],
        row["auth_sealed"],
    )
    target = gw.targets.get(key)
    if target is None:
        if len(gw.targets) >= TARGETS_KEPT:
            gw.targets.clear()
        target = target_of(row, gw.sealer, gw.settings.agent_timeout_s)
        gw.targets[key] = target
    return target
