"""Stream a start or a follow-up (§8.2): relay the agent's frames as they come, record each.

The agent's stream is read by a background task, not by the response: a caller who goes
away stops receiving, while the gateway reads the stream to its end, records it and
releases the task's claim (a start claims its task with `task_created`, a follow-up before
it sends), so that no watcher follows the task while its stream runs. An agent without
streaming gets the blocking send and the caller its answer as one event.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

import msgspec

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import ERROR, STATUS, Update
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.core.access.callers import Caller
from a2a_continue.core.agents.exchange import Forwarded, exchange_stream
from a2a_continue.core.agents.registry import can_stream
from a2a_continue.core.idempotency.retries import KeyHold
from a2a_continue.core.shapes.messages import ContinueBody, StartBody
from a2a_continue.core.tasks.claims import release_claim, renew_claim
from a2a_continue.core.tasks.store import Stored, record_outcome
from a2a_continue.core.tasks.updates import record_update
from a2a_continue.core.turns.continuation import FollowUp, begin_follow_up, send_follow_up
from a2a_continue.core.turns.invoke import Start, begin_start, send_start
from a2a_continue.errors import AgentBadAnswer, AgentTimeout, AppError
from a2a_continue.obs import metrics
from a2a_continue.runtime.db import Record
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.running import running

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Relayed:
    """One event for the caller: what it carries, the agent's frame (its bytes and what it was
    read as), or the gateway's final problem when the stream failed."""

    event: str
    data: bytes
    answer: Update | None
    problem: AppError | None = None
    # The task's state and the time of its status as stored once the frame was recorded.
    stored: Stored | None = None


def problem_event(error: AppError) -> Relayed:
    """The final `error` event of a stream the gateway had to end."""
    return Relayed(ERROR, msgspec.json.encode(error.body()), None, error)


def ends_stream(update: Update, version: str) -> bool:
    """A status update that settles the task ends the stream (0.3: only with `final: true`).

    A task snapshot never does: agents send one first on a follow-up, still interrupted.
    """
    if update.kind == ERROR:
        return True
    return update.kind == STATUS and update.settles and (version == "1.0" or update.final)


def stored_status(row: Record) -> Stored:
    """A stored task's state and the time of its status, from a task row read or written."""
    return Stored(str(row["state"]), row["status_at"])


class Relay:
    """What the caller reads: the frames as they arrive, then the end."""

    def __init__(self, state: str | None = None) -> None:
        self.state = state
        self._queue: asyncio.Queue[Relayed | None] = asyncio.Queue()
        self._listening = True
        self._head: Relayed | None = None
        self._peeked = False

    def put(self, item: Relayed | None) -> None:
        """Hand an item to the caller, if one is still reading."""
        if self._listening:
            self._queue.put_nowait(item)

    async def first(self) -> None:
        """Wait for the first item; a failure before any frame is raised (a plain 5xx)."""
        head = await self._queue.get()
        if head is not None and head.problem is not None:
            self._listening = False
            raise head.problem
        self._head = head
        self._peeked = True

    async def items(self) -> AsyncIterator[Relayed]:
        """Yield each item until the stream ends; leaving early detaches the caller."""
        try:
            item = self._head if self._peeked else await self._queue.get()
            while item is not None:
                yield item
                item = await self._queue.get()
        finally:
            self._listening = False


def single(result: Forwarded) -> Relay:
    """The blocking answer of an agent without streaming, as a one-event relay."""
    relay = Relay(result.state)
    stored = None if result.state is None else Stored(result.state, result.status_at)
    relay.put(Relayed(result.answer.kind, result.raw, result.answer, stored=stored))
    relay.put(None)
    return relay


class Recorder:
    """Records a stream's frames on the task, under its claim; the start and the follow-up
    differ in the first frame and in how the claim is taken."""

    def __init__(
        self, gw: Gateway, caller: Caller, message_id: str, claim: uuid.UUID, claim_ttl: float
    ) -> None:
        self.gw, self.caller, self.message_id = gw, caller, message_id
        self.claim, self.claim_ttl = claim, claim_ttl  # the lifetime of the claim unless renewed
        self.row_id: uuid.UUID | None = None
        self.task_id: str | None = None
        self.frames = 0

    async def frame(self, update: Update) -> Stored | None:
        """Record one frame (a failed write is logged: the agent already has the message);
        return the task's state and status time as stored then (None: not known)."""
        self.frames += 1
        ours = update.task_id is None or update.task_id == self.task_id
        try:
            if self.row_id is not None and ours:
                async with self.gw.connection() as conn:
                    applied = await record_update(
                        conn, self.row_id, update, source="stream", actor=self.caller.sub
                    )
                return stored_status(applied.row)
        except Exception:
            log.exception("could not record a stream frame on task %s", self.row_id)
        return None

    async def failed(self, error: AppError) -> None:
        """Log a stream that ended without the agent closing it (timeout, break, bad frame)."""
        if self.row_id is None:
            return
        data = {"messageId": self.message_id, "reason": error.slug, "detail": error.detail}
        try:
            async with self.gw.connection() as conn:
                await record_outcome(
                    conn,
                    self.row_id,
                    state=None,
                    event="task_continue_failed",
                    actor=self.caller.sub,
                    data=data,
                )
        except Exception:
            log.exception("could not log the failed stream on task %s", self.row_id)

    async def renew(self) -> None:
        """Push the claim's expiry forward by its lifetime (none before the task is known)."""
        if self.row_id is not None:
            async with self.gw.connection() as conn:
                await renew_claim(conn, self.row_id, self.claim, self.claim_ttl)

    async def release(self) -> None:
        """Give up the claim without recording anything."""
        if self.row_id is None:
            return
        try:
            async with self.gw.connection() as conn:
                await release_claim(conn, self.row_id, self.claim)
        except Exception:
            log.exception("could not release the claim on task %s", self.row_id)

    async def done(self) -> None:
        """The stream has ended, however it ended: its claim is released, and a task it left
        live goes to the watcher."""
        await self.release()
        if self.gw.watcher is not None:
            self.gw.watcher.nudge()


class StartRecorder(Recorder):
    """A streamed start: `task_created` as soon as a frame names the task, claiming it."""

    def __init__(self, start: Start, key: KeyHold | None = None) -> None:
        super().__init__(start.gw, start.caller, start.message_id, uuid.uuid4(), start.claim_ttl())
        self.start = start
        self.key = key

    async def frame(self, update: Update) -> Stored | None:
        task = update.task()
        if self.task_id is not None or task is None:
            return await super().frame(update)
        self.frames += 1
        # 503, or 502 for another caller's task: ends the stream.
        row = await self.start.store(task, self.claim)
        self.task_id, self.row_id = task.id, row["id"]
        if self.key is not None:
            await self.key.mark_streamed(task.id)  # retries of the key are sent to its events
        return stored_status(row)


class FollowUpRecorder(Recorder):
    """A streamed follow-up: `task_continued` with the first frame, the claim held throughout."""

    def __init__(self, follow_up: FollowUp) -> None:
        claim, ttl = follow_up.claim, follow_up.claim_ttl()
        super().__init__(follow_up.gw, follow_up.caller, follow_up.message_id, claim, ttl)
        self.follow_up = follow_up
        self.row_id = follow_up.row["row_id"]
        self.task_id = follow_up.row["task_id"]

    async def frame(self, update: Update) -> Stored | None:
        if self.frames:
            return await super().frame(update)
        self.frames += 1
        metrics.followup("continued")
        data: dict[str, Any] = {"messageId": self.message_id}
        if update.error_code is not None:
            data["error"] = {"code": update.error_code}
        if update.task_id not in (None, self.task_id):
            update = Update(kind=update.kind)  # another task's frame changes nothing here
        assert self.row_id is not None
        try:
            async with self.gw.connection() as conn:
                applied = await record_update(
                    conn,
                    self.row_id,
                    update,
                    source="stream",
                    actor=self.caller.sub,
                    event="task_continued",
                    data=data,
                    always=True,
                )
            return stored_status(applied.row)
        except Exception:
            log.exception("could not record the follow-up to task %s", self.row_id)
        return None

    async def failed(self, error: AppError) -> None:
        # A follow-up counts once: one the agent already answered stays `continued`.
        await self.follow_up.failed(error, counted=self.frames == 0)


async def _renew(recorder: Recorder) -> None:
    every = max(recorder.claim_ttl / 3, 0.1)
    while True:
        await asyncio.sleep(every)
        try:
            await recorder.renew()
        except Exception:
            log.warning("could not renew the claim on task %s", recorder.row_id)


async def _pump(
    gw: Gateway,
    target: AgentTarget,
    payload: dict[str, Any],
    recorder: Recorder,
    relay: Relay,
) -> None:
    """Read the agent's stream to its end (bounded), recording and relaying each frame."""
    failure: AppError | None = None
    try:
        try:
            # The call is counted outside the time limit, so that it sees the limit's TimeoutError.
            async with (
                exchange_stream(gw, target, payload) as frames,
                asyncio.timeout(gw.settings.stream_max_s),
            ):
                async for frame, update in frames:
                    stored = await recorder.frame(update)
                    relay.put(Relayed(update.kind, frame.raw, update, stored=stored))
                    if ends_stream(update, target.protocol_version):
                        break
        except TimeoutError:
            limit = gw.settings.stream_max_s
            failure = AgentTimeout(f"the agent's stream ran longer than {limit:g} s")
        except AppError as error:
            failure = error
        except protocol.ProtocolError as exc:
            detail = f"a frame of the agent's stream is not an A2A result: {exc}"
            failure = AgentBadAnswer(detail)
        except Exception:
            log.exception("the stream of task %s failed", recorder.row_id)
            failure = AppError("the stream failed unexpectedly; it has been logged")
        if failure is not None:
            log.warning("stream of task %s ended: %s", recorder.row_id, failure.detail)
            await recorder.failed(failure)
            relay.put(problem_event(failure))
    finally:
        await recorder.done()
        relay.put(None)


async def _run(
    gw: Gateway,
    target: AgentTarget,
    payload: dict[str, Any],
    recorder: Recorder,
    relay: Relay,
) -> None:
    async with running(_renew(recorder)):
        await _pump(gw, target, payload, recorder, relay)


async def _open(
    gw: Gateway,
    target: AgentTarget,
    payload: dict[str, Any],
    recorder: Recorder,
) -> Relay:
    relay = Relay()
    # The agent's slot is held for the whole stream (see runtime/call_limits.py); a busy agent is a
    # 503 before anything is sent or recorded.
    agent = target.agent_id or target.endpoint_url
    try:
        gw.slots.take(agent)
    except AppError:
        await recorder.release()
        raise
    try:
        work = _run(gw, target, payload, recorder, relay)
        gw.open_streams.spawn(_holding_slot(gw, agent, work), name=f"a2ac-stream-{payload['id']}")
    except BaseException:
        gw.slots.give(agent)
        raise
    await relay.first()
    return relay


async def _holding_slot(gw: Gateway, agent: uuid.UUID | str, work: Awaitable[None]) -> None:
    try:
        await work
    finally:
        gw.slots.give(agent)


async def stream_start(
    gw: Gateway, caller: Caller, agent_id: uuid.UUID, body: StartBody, key: KeyHold | None = None
) -> Relay:
    """Start a task with a streamed answer; the first failure before any frame is raised."""
    start = await begin_start(gw, caller, agent_id, body)
    if not can_stream(start.agent):
        result = await send_start(start)
        if key is not None and result.answer.answered is not None:
            # The one event names the task as a stream's first frame would: retries go there.
            await key.mark_streamed(result.answer.answered.id)
        return single(result)
    recorder = StartRecorder(start, key)
    return await _open(gw, start.target, start.payload(streaming=True), recorder)


async def stream_follow_up(
    gw: Gateway,
    caller: Caller,
    agent_id: uuid.UUID,
    task_id: str,
    body: ContinueBody,
    key: KeyHold | None = None,
) -> Relay:
    """Continue a task with a streamed answer, under the same claim and refusals as §5."""
    follow_up = await begin_follow_up(gw, caller, agent_id, task_id, body, key)
    if not can_stream(follow_up.row):
        return single(await send_follow_up(gw, follow_up, body))
    try:
        target = follow_up.target()
        payload = follow_up.payload(body, streaming=True)
    except BaseException:
        await follow_up.release()
        raise
    return await _open(gw, target, payload, FollowUpRecorder(follow_up))
