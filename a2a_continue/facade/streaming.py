"""Streaming JSON-RPC methods of the façade: frames in the client's version, as SSE events.

A streaming send rides on the REST streaming start and follow-up (§8.2: the same claim,
recording and refusals); a subscription is the stored task, then the task's event log as it
grows (§8.3). Either way the client reads JSON-RPC responses carrying its own id.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from sse_starlette import ServerSentEvent

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import ARTIFACT, ERROR, STATUS, TASK
from a2a_continue.a2a.protocol import TERMINAL_STATES
from a2a_continue.core.tasks.event_stream import EventStream
from a2a_continue.core.tasks.models import EventOut
from a2a_continue.core.tasks.reads import find_task, task_out
from a2a_continue.core.turns import relay
from a2a_continue.errors import AppError
from a2a_continue.facade import keys, push, translate
from a2a_continue.facade import methods as m
from a2a_continue.facade.context import Call
from a2a_continue.facade.errors import (
    INTERNAL_ERROR,
    UNSUPPORTED_OPERATION,
    RpcError,
    from_agent_error,
    from_app_error,
)
from a2a_continue.facade.stored import stored_task
from a2a_continue.http.sse import StreamResponse
from a2a_continue.runtime.open_streams import OpenStream

log = logging.getLogger(__name__)

# Events that report the task's status (a follow-up, an update, a cancel); the others
# (a failed follow-up, a redirect, a watch given up) leave the state as it was.
_STATUS_EVENTS = frozenset({"task_continued", "task_updated", "task_canceled"})


@dataclass(frozen=True, slots=True)
class ErrorFrame:
    """A JSON-RPC error, already in the client's version, that ends the stream."""

    error: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Result:
    """One result for the client: what it is (as the reader of agent answers says, or as the
    gateway made it) and its object, in either version's shape."""

    kind: str
    obj: Any


Item = Result | ErrorFrame


class ClientFrames:
    """Shape the results of one stream for a client of one version.

    a2a-sdk 0.3.x clients accept exactly one Task frame per stream and need `final` on
    status updates: for 0.3 a later task snapshot becomes a status update, and `final`
    marks the status after which the stream ends (``final_states``).
    """

    def __init__(self, version: str, final_states: frozenset[str]) -> None:
        self.version = version
        self.final_states = final_states
        self.task_sent = False

    def final(self, state: object) -> bool:
        """Tell whether a status with ``state`` is the last of this stream."""
        return protocol.canonical_state(state) in self.final_states

    def shape(self, result: Result) -> object | None:
        """Return the frame to send for one result (None: nothing to send)."""
        kind, obj = result.kind, result.obj
        if kind == TASK:
            if self.version == "0.3" and self.task_sent:
                return self._snapshot_as_status(obj)
            self.task_sent = True
        final = False
        if kind == STATUS:
            status = obj.get("status")
            final = self.final(status.get("state") if isinstance(status, dict) else None)
        return translate.shaped(kind, obj, self.version, final=final)

    def _snapshot_as_status(self, task: dict[str, Any]) -> object | None:
        status = task.get("status")
        if not isinstance(status, dict):
            return None
        update = {"taskId": task.get("id"), "contextId": task.get("contextId"), "status": status}
        return translate.status_update(update, self.version, self.final(status.get("state")))


# ---- streaming send ---------------------------------------------------------------------


def _relayed(item: relay.Relayed, call: Call) -> Item:
    if item.problem is not None:
        rendered = from_app_error(item.problem, call.method, call.version)
        return ErrorFrame(rendered.render(call.version))
    answer = item.answer
    assert answer is not None  # only the gateway's own problem events carry none
    if answer.kind == ERROR:
        return ErrorFrame(from_agent_error(answer.raw, call.version))
    stored = item.stored
    if stored is None:
        return Result(answer.kind, answer.raw)
    return Result(
        answer.kind, translate.stamped(answer.kind, answer.raw, stored.state, stored.status_at)
    )


async def send_frames(call: Call, params: m.JSON) -> AsyncGenerator[Item]:
    """SendStreamingMessage / message/stream: a streamed start, or a streamed follow-up."""
    body = m.send_body(params)
    assert body.message is not None
    task_id = body.message.task_id
    inline = push.inline_config(params)
    if inline is not None:
        push.check_inline(call, inline)
    async with keys.hold_for(call, params, with_claim=task_id is not None) as held_key:
        if task_id is None:
            opened = await relay.stream_start(
                call.gw, call.caller, call.agent_id, body, key=held_key
            )
        else:
            if inline is not None:
                await push.create_inline(call, task_id, inline, deliver_task=False)
            follow_up = m.as_continue(body)
            opened = await relay.stream_follow_up(
                call.gw, call.caller, call.agent_id, task_id, follow_up, key=held_key
            )
        await held_key.mark_streamed(task_id)  # a stream keeps nothing; retries go to the events
    async for item in opened.items():
        if inline is not None and task_id is None and item.answer and item.answer.task_id:
            # A streamed start's config comes with its task (recorded with this first frame).
            await _inline_on_start(call, item.answer.task_id, inline)
            inline = None
        yield _relayed(item, call)


async def _inline_on_start(call: Call, task_id: str, inline: object) -> None:
    try:
        await push.create_inline(call, task_id, inline, deliver_task=True)
    except Exception:
        log.exception("could not create the push config given on a streamed start")


# ---- subscribe ------------------------------------------------------------------------


def _task_id_param(params: m.JSON) -> str:
    value = params.get("id")
    if not isinstance(value, str) or not value:
        raise m.bad_params("$.params.id", "must be a non-empty string")
    return value


class Follower:
    """Turn one task's logged events into the updates a subscriber has not seen yet."""

    def __init__(self, call: Call, row: Any) -> None:
        self.call, self.task_id, self.context_id = call, row["task_id"], row["context_id"]
        self.seen = list(row["artifacts"])

    async def updates(self, event: EventOut) -> list[Item]:
        """The artifact and status updates one status-bearing event stands for."""
        if event.type not in _STATUS_EVENTS or event.new_state is None:
            return []
        async with self.call.gw.connection() as conn:
            row = await find_task(conn, self.call.caller, self.call.agent_id, self.task_id)
        ids: m.JSON = {"taskId": self.task_id, "contextId": self.context_id}
        frames: list[Item] = [
            Result(ARTIFACT, {"kind": "artifact-update", **ids, "artifact": artifact})
            for artifact in row["artifacts"]
            if artifact not in self.seen
        ]
        self.seen = list(row["artifacts"])
        status: m.JSON = {
            "state": event.new_state,
            "timestamp": translate.timestamp(status_time(event, row)),
        }
        if row["status_message"] is not None and event.new_state == row["state"]:
            status["message"] = row["status_message"]
        frames.append(Result(STATUS, {"kind": "status-update", **ids, "status": status}))
        return frames


def status_time(event: EventOut, row: Any) -> dt.datetime:
    """When the status an event reports began: the stored time of the task's status when the
    event left it as it was (artifacts only), else the event's own time (the status it set)."""
    at: dt.datetime = row["status_at"]
    same = event.new_state == row["state"] and at <= event.created_at
    return at if same else event.created_at


async def subscribe_frames(call: Call, params: m.JSON) -> AsyncGenerator[Item]:
    """SubscribeToTask / tasks/resubscribe: the stored task, then its updates until terminal."""
    task_id = _task_id_param(params)
    async with call.gw.connection() as conn:
        row = await find_task(conn, call.caller, call.agent_id, task_id)
    if protocol.is_terminal_task_state(row["state"]):
        raise RpcError(
            UNSUPPORTED_OPERATION,
            f"the task is {row['state']}; a terminal task has no updates to follow",
            state=row["state"],
            type="task-terminal",
        )
    stream = await EventStream(
        call.gw, call.caller, call.agent_id, task_id, row["last_seq"], TERMINAL_STATES
    ).open()
    yield Result(TASK, stored_task(task_out(row), "1.0", row["status_at"]))
    follower = Follower(call, row)
    async for event in stream.events():
        for frame in await follower.updates(event):
            yield frame


# ---- the response -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Envelope:
    """How one binding carries stream frames: a result, and the error that ends the stream."""

    result: Callable[[Any], ServerSentEvent]
    error: Callable[[dict[str, Any]], ServerSentEvent]


def rpc_envelope(rpc_id: Any) -> Envelope:
    """JSON-RPC: each frame a JSON-RPC response carrying the client's id."""

    def event(key: str, value: Any) -> ServerSentEvent:
        body = {"jsonrpc": "2.0", "id": rpc_id, key: value}
        return ServerSentEvent(data=msgspec.json.encode(body).decode())

    return Envelope(lambda result: event("result", result), lambda error: event("error", error))


async def _relay(
    call: Call, envelope: Envelope, frames: ClientFrames, first: Item, rest: AsyncGenerator[Item]
) -> AsyncIterator[ServerSentEvent]:
    try:
        item = first
        while True:
            if isinstance(item, ErrorFrame):
                yield envelope.error(item.error)
                return
            shaped = frames.shape(item)
            if shaped is not None:
                yield envelope.result(shaped)
            item = await anext(rest)
    except StopAsyncIteration:
        return
    except m.AgentRpcError as error:
        yield envelope.error(error.error)
    except AppError as error:
        rendered = from_app_error(error, call.method, call.version)
        yield envelope.error(rendered.render(call.version))
    except RpcError as error:
        yield envelope.error(error.render(call.version))
    except Exception:
        log.exception("unexpected error in the %s stream of agent %s", call.method, call.agent_id)
        bug = RpcError(INTERNAL_ERROR, "an unexpected error occurred; it has been logged")
        yield envelope.error(bug.render(call.version))
    finally:
        await rest.aclose()


def stream_response(
    call: Call,
    envelope: Envelope,
    final_states: frozenset[str],
    first: Item,
    rest: AsyncGenerator[Item],
    opened: OpenStream,
) -> StreamResponse:
    """Answer 200 text/event-stream: the first frame, then the rest as they come."""
    frames = ClientFrames(call.version, final_states)
    return StreamResponse(_relay(call, envelope, frames, first, rest), opened, call.gw)
