"""The watcher: follow the tasks an agent leaves running until they settle, in every process.

Each process runs one watcher (started and stopped in the app's lifespan). It leases live
tasks (see ``leases``) at start-up, periodically, and right after a send of its own that
leaves a task live (see ``handover``); it follows each leased task (subscribing when the agent
streams, else polling ``GetTask`` with back-off), records every change as ``task_updated``,
and stops at a terminal or interrupted state, whoever stored it (checked before each poll,
with each frame and at each renewal), when the task is gone, after ``A2AC_WATCH_MAX_S``
(``watch-expired``), when the agent no longer knows the task (``agent-lost-task``) or cannot
answer ``GetTask`` at all (``agent-cannot-get``). One statement renews all the leases a
process holds; a lease it could not renew is given up before it expires, so that two processes
never follow one task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import ERROR, MESSAGE, TASK, Update
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.background.pushed import follow_pushes
from a2a_continue.core.agents.exchange import exchange_stream, target_of
from a2a_continue.core.agents.registry import can_push, can_stream
from a2a_continue.core.tasks import watches
from a2a_continue.core.tasks.store import SYSTEM_ACTOR
from a2a_continue.core.tasks.updates import record_update
from a2a_continue.core.watch import leases
from a2a_continue.core.watch.push_in import end_configs
from a2a_continue.core.watch.snapshots import TASK_NOT_FOUND, ask_agent, status_mark
from a2a_continue.errors import (
    AgentBadAnswer,
    AgentTimeout,
    AgentUnreachable,
    DatabaseUnavailable,
    NotFound,
)
from a2a_continue.obs import metrics
from a2a_continue.runtime.call_limits import AgentBusy
from a2a_continue.runtime.db import Record
from a2a_continue.runtime.gateway import DB_DOWN, Gateway
from a2a_continue.settings import Settings

log = logging.getLogger(__name__)

# GetTask answers that no later poll can change: method not found, unsupported operation.
CANNOT_GET = frozenset({-32601, -32004})


class _Stop(Exception):
    """The watch ends without a final state: ``reason`` says why (None: the task is gone)."""

    def __init__(self, reason: str | None, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


@dataclass
class Watch:
    """One task this process follows under its lease."""

    row_id: uuid.UUID
    task_id: str
    token: uuid.UUID
    target: AgentTarget
    streaming: bool
    past: dict[str, Any] | None
    remaining_s: float
    seen: dict[str, Any] | None = None
    # The agent pushes (SPEC §19); whether the last ask recorded a change.
    pushes: bool = False
    recorded: bool = False


class Watcher:
    """Follows live tasks under leases; bounded by ``A2AC_WATCH_CONCURRENCY`` per process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._gw: Gateway | None = None
        # Task row id → the lease token and the asyncio task following it.
        self._following: dict[uuid.UUID, tuple[uuid.UUID, asyncio.Task[None]]] = {}
        self._wake = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self, gw: Gateway) -> None:
        """Start picking up and renewing leases (the first pick-up runs at once)."""
        self._gw = gw
        self._loops = [
            asyncio.create_task(self._pick_up_loop(), name="watcher-pick-up"),
            asyncio.create_task(self._renew_loop(), name="watcher-renew"),
        ]

    async def stop(self) -> None:
        """Stop following and give the leases back, so that another process takes them at once."""
        self._stopping = True
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        held = {row_id: token for row_id, (token, _) in self._following.items()}
        following = [task for _, task in self._following.values()]
        for task in following:
            task.cancel()
        await asyncio.gather(*following, return_exceptions=True)
        if held:
            try:
                async with self.gw.connection() as conn:
                    await watches.release_watches(conn, held)
            except Exception:
                log.exception("could not release %d watch leases; they expire instead", len(held))

    @property
    def gw(self) -> Gateway:
        """The gateway the watcher runs in."""
        assert self._gw is not None, "the watcher is not started"
        return self._gw

    @property
    def following(self) -> int:
        """How many tasks this process follows now."""
        return len(self._following)

    def room(self) -> int:
        """How many more tasks this process may follow."""
        return 0 if self._stopping else self.settings.watch_concurrency - len(self._following)

    def nudge(self) -> None:
        """Pick up free live tasks now rather than at the next period."""
        self._wake.set()

    # ---- leases -------------------------------------------------------------------------

    async def _pick_up_loop(self) -> None:
        while True:
            room = self.room()
            if room > 0:
                try:
                    async with self.gw.connection() as conn:
                        rows = await watches.pick_up_watches(
                            conn, room, self.settings.watch_lease_s
                        )
                except Exception as exc:
                    log.warning("watcher pick-up failed (%s); retrying", type(exc).__name__)
                    rows = []
                for row in rows:
                    self.follow(row)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.watch_pickup_s)
            self._wake.clear()

    async def _renew_loop(self) -> None:
        renewed_at = time.monotonic()
        while True:
            await asyncio.sleep(self.settings.watch_renew_s)
            held = {row_id: token for row_id, (token, _) in self._following.items()}
            if not held:
                renewed_at = time.monotonic()
                continue
            try:
                async with self.gw.connection() as conn:
                    kept = await leases.renew(conn, held, self.settings.watch_lease_s)
            except Exception as exc:
                log.warning("watch leases not renewed (%s)", type(exc).__name__)
                # Stop before the leases can expire: another process may take them then.
                if time.monotonic() - renewed_at + self.settings.watch_renew_s >= (
                    self.settings.watch_lease_s
                ):
                    self._drop(held)
                continue
            renewed_at = time.monotonic()
            self._drop({row_id: token for row_id, token in held.items() if row_id not in kept})
            await self._end_settled({row_id: held[row_id] for row_id, done in kept.items() if done})

    def _drop(self, lost: dict[uuid.UUID, uuid.UUID]) -> None:
        """Stop following tasks whose lease is no longer ours (deleted, or taken over)."""
        for row_id, token in lost.items():
            entry = self._following.get(row_id)
            if entry is not None and entry[0] == token:
                log.info("%s stopped: its lease is gone", entry[1].get_name())
                entry[1].cancel()

    async def _end_settled(self, settled: dict[uuid.UUID, uuid.UUID]) -> None:
        """End the watches of tasks settled as stored by another writer (a cancel, a refresh).

        Their followers may be waiting on a silent subscription or a long poll pause.
        """
        if not settled:
            return
        for row_id, token in settled.items():
            entry = self._following.get(row_id)
            if entry is not None and entry[0] == token:
                log.info("%s stopped: the stored task settled", entry[1].get_name())
                entry[1].cancel()
        try:
            async with self.gw.connection() as conn:
                for row_id, token in settled.items():
                    await watches.finish_watch(conn, row_id, token)
        except Exception as exc:
            log.warning("watch of settled tasks not ended (%s); retrying", type(exc).__name__)

    # ---- following one task ---------------------------------------------------------------

    def follow(self, row: Record) -> None:
        """Follow a task this process has just leased."""
        row_id, token = row["row_id"], row["watch_token"]
        previous = self._following.get(row_id)
        if previous is not None:
            previous[1].cancel()
        task = asyncio.create_task(self._run(row), name=f"watch of task {row['task_id']}")
        self._following[row_id] = (token, task)
        metrics.watched_tasks(len(self._following))

    async def _run(self, row: Record) -> None:
        row_id, token = row["row_id"], row["watch_token"]
        watch: Watch | None = None
        try:
            watch = self._watch_of(row)
            await self._watch(watch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("watch of task %s failed; its lease is given back", row["task_id"])
            with contextlib.suppress(Exception):
                async with self.gw.connection() as conn:
                    await watches.release_watches(conn, {row_id: token})
        finally:
            entry = self._following.get(row_id)
            if entry is not None and entry[0] == token:
                del self._following[row_id]
                metrics.watched_tasks(len(self._following))
            if watch is not None and watch.pushes and not self._stopping:
                self.gw.in_background(end_configs(self.gw, watch.target, row_id))

    def _watch_of(self, row: Record) -> Watch:
        return Watch(
            row_id=row["row_id"],
            task_id=row["task_id"],
            token=row["watch_token"],
            target=target_of(row, self.gw.sealer, self.settings.agent_timeout_s),
            streaming=can_stream(row),
            past=row["watch_past"],
            remaining_s=self.settings.watch_max_s - (row["watched_s"] or 0.0),
            pushes=can_push(row),
        )

    async def _watch(self, watch: Watch) -> None:
        """Follow the task to its end, then end the watch as it went."""
        try:
            async with asyncio.timeout(max(watch.remaining_s, 0.0)) as deadline:
                pushed = watch.pushes and await self._pushed(watch)
                if not (pushed or (watch.streaming and await self._subscribe(watch))):
                    await self._poll(watch)
        except TimeoutError:
            if not deadline.expired():
                raise
            await self._give_up(watch, "watch-expired", "the task did not settle in time")
            return
        except _Stop as stop:
            if stop.reason is not None:
                await self._give_up(watch, stop.reason, stop.detail)
            return
        async with self.gw.connection() as conn:
            await watches.finish_watch(conn, watch.row_id, watch.token)

    async def _give_up(self, watch: Watch, reason: str, detail: str) -> None:
        log.warning("watch of task %s gave up: %s (%s)", watch.task_id, reason, detail)
        async with self.gw.connection() as conn:
            await watches.give_up_watch(
                conn,
                watch.row_id,
                watch.token,
                SYSTEM_ACTOR,
                {"reason": reason, "detail": detail},
            )

    async def _pushed(self, watch: Watch) -> bool:
        """Let the agent push the task's changes, checked once a period; False: poll."""

        async def check() -> bool | None:
            watch.recorded = False
            moved = await self._poll_once(watch)
            return None if moved is None else watch.recorded

        return await follow_pushes(self.gw, watch.target, watch.row_id, watch.task_id, check)

    async def _subscribe(self, watch: Watch) -> bool:
        """Follow the agent's stream of the task; False when polling has to take over.

        The agent may refuse the subscription (a JSON-RPC error: some 0.3 agents answer -32001
        for a task that exists but is not running), fail, or close the stream before the task
        settles; the watch then polls. A subscription takes none of the agent's call slots
        (``A2AC_AGENT_CONCURRENCY``): it is mostly idle, bounded by the watcher's own
        concurrency, and must not starve callers; each poll takes one, like any call.
        """
        target = watch.target
        payload = protocol.build_subscribe_request(
            target.protocol_version, protocol.new_rpc_id(), watch.task_id
        )
        try:
            async with exchange_stream(self.gw, target, payload) as frames:
                async for _, update in frames:
                    if update.kind == ERROR:
                        log.info(
                            "watch of task %s: subscription refused (%s); polling",
                            watch.task_id,
                            update.error_code,
                        )
                        return False
                    if update.task_id not in (None, watch.task_id) or update.kind == MESSAGE:
                        continue
                    if await self.observe(watch, update, "subscribe") is None:
                        return True
        except (AgentTimeout, AgentUnreachable, AgentBadAnswer, protocol.ProtocolError) as exc:
            log.info("watch of task %s: subscription ended (%s); polling", watch.task_id, exc)
            return False
        log.info("watch of task %s: the agent closed its stream early; polling", watch.task_id)
        return False

    async def _poll(self, watch: Watch) -> None:
        """Ask the agent with ``GetTask`` until the task settles, backing off between asks."""
        base, cap = self.settings.watch_poll_base_s, self.settings.watch_poll_max_s
        delay = base
        while True:
            await asyncio.sleep(delay)
            moved = await self._poll_once(watch)
            if moved is None:
                return
            delay = base if moved else min(delay * 2, cap)

    async def _poll_once(self, watch: Watch) -> bool | None:
        """Ask once; None when the task settled, else whether the agent reported a change."""
        if await self._settled_as_stored(watch):
            return None
        try:
            update = await ask_agent(self.gw, watch.target, watch.task_id)
        except (AgentTimeout, AgentUnreachable, AgentBadAnswer, AgentBusy) as error:
            log.warning("watch of task %s: %s", watch.task_id, error.detail)
            return False
        if update.kind == ERROR and update.error_code == TASK_NOT_FOUND:
            raise _Stop("agent-lost-task", f"the agent answered GetTask with {TASK_NOT_FOUND}")
        if update.kind == ERROR and update.error_code in CANNOT_GET:
            raise _Stop("agent-cannot-get", f"the agent answered GetTask with {update.error_code}")
        if update.kind != TASK or update.task_id != watch.task_id:
            what = f"error {update.error_code}" if update.kind == ERROR else "another answer"
            log.warning("watch of task %s: the agent answered GetTask with %s", watch.task_id, what)
            return False
        return await self.observe(watch, update, "poll")

    async def _settled_as_stored(self, watch: Watch) -> bool:
        """Tell whether another writer settled the task (a cancel, say) since the last look."""
        try:
            async with self.gw.connection() as conn:
                found = await leases.stored_settled(conn, watch.row_id, watch.past)
        except (DatabaseUnavailable, *DB_DOWN) as exc:
            log.warning("watch of task %s: not read (%s)", watch.task_id, type(exc).__name__)
            return False
        if found is None:
            raise _Stop(None)
        return found

    async def observe(self, watch: Watch, update: Update, source: str) -> bool | None:
        """Record what the agent reports; None when the watch is over, else whether it moved."""
        try:
            async with self.gw.connection() as conn:
                applied = await record_update(
                    conn, watch.row_id, update, source=source, actor=SYSTEM_ACTOR
                )
        except NotFound:
            raise _Stop(None) from None
        except (DatabaseUnavailable, *DB_DOWN) as exc:
            log.warning("watch of task %s: not recorded (%s)", watch.task_id, type(exc).__name__)
            return False
        watch.recorded = applied.seq is not None
        if leases.settled(applied.state, applied.row["status_message"], watch.past):
            return None
        if update.state is None:
            return applied.seq is not None
        mark = status_mark(update)
        moved, watch.seen = mark != watch.seen, mark
        if watch.past is not None:
            if mark == watch.past:
                return False  # still the status the send was answered with
            watch.past = None
            async with self.gw.connection() as conn:
                await watches.forget_watch_past(conn, watch.row_id, watch.token)
        return None if protocol.is_interrupted_task_state(update.state) else moved
