"""The limits of one process: the overrides it has read, the tokens and slots it holds, and
the admission of a request against every subject it counts for."""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import suppress
from typing import Any

from a2a_continue.core.limits import buckets, slots, teams
from a2a_continue.core.limits.buckets import Bucket
from a2a_continue.core.limits.overrides import load_overrides
from a2a_continue.core.limits.policy import Kind, Limits, Subject, defaults, merged
from a2a_continue.core.limits.slots import Slots
from a2a_continue.errors import AppError, DatabaseUnavailable
from a2a_continue.obs import metrics
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.running import cancel_and_wait

log = logging.getLogger(__name__)

NO_LIMITS = Limits()
# A bucket or slot count unused this long is forgotten (its unspent tokens with it).
IDLE_S = 60.0


class Admission:
    """The in-flight slots one admitted request holds; ``release`` when it ends."""

    __slots__ = ("held",)

    def __init__(self, held: list[Slots]) -> None:
        self.held = held

    def release(self) -> None:
        """Give back the request's slots."""
        for slot in self.held:
            slot.give()
        self.held = []


class Limiter:
    """Admits requests against the limits of their caller and team, for one process."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        self.defaults = defaults(gateway.settings)
        self.overrides: dict[Subject, dict[str, float | int | None]] = {}
        self.buckets: dict[Subject, Bucket] = {}
        self.slots: dict[Subject, Slots] = {}
        self.teams = teams.TeamCache()
        self.holder = uuid.uuid4()
        self.renewed_at = 0.0
        self._loop: asyncio.Task[None] | None = None

    def limits(self, subject: Subject) -> Limits:
        """The limits that apply to ``subject`` now."""
        given = self.overrides.get(subject)
        default = self.defaults[subject[0]]
        return default if given is None else merged(default, given)

    def default(self, kind: Kind) -> Limits:
        """The default limits of a kind of subject."""
        return self.defaults[kind]

    def limited(self, kind: Kind) -> bool:
        """Whether any subject of this kind can have a limit (else none is looked up)."""
        if self.defaults[kind] != NO_LIMITS:
            return True
        return any(subject[0] == kind for subject in self.overrides)

    def set_override(self, subject: Subject, given: dict[str, float | int | None] | None) -> None:
        """Apply an override (None: its removal) in this process at once."""
        if given is None:
            self.overrides.pop(subject, None)
        else:
            self.overrides[subject] = given

    async def admit(self, subjects: list[Subject], inflight: bool) -> Admission:
        """Admit a request counting against every subject, or raise the refusal (429, 503);
        nothing is spent when any refuses."""
        spent: list[Bucket] = []
        held: list[Slots] = []
        try:
            for subject in subjects:
                limits = self.limits(subject)
                if limits.rated:
                    bucket = self._bucket(subject, limits)
                    await bucket.take()
                    spent.append(bucket)
            if inflight:
                for subject in subjects:
                    cap = self.limits(subject).inflight
                    if cap is not None:
                        slot = self._slots(subject)
                        await slot.take(cap)
                        held.append(slot)
        except AppError as refusal:
            for bucket in spent:
                bucket.give_back()
            Admission(held).release()
            if refusal.status == 429:
                metrics.rate_limited(refusal.slug)
            raise
        return Admission(held)

    async def team_of_task(self, agent_id: Any, task_id: str) -> str | None:
        """The team of a task (None: none, or no such task), read once per process."""
        known, team = self.teams.get(agent_id, task_id)
        if known:
            return team
        async with self.gw.connection() as conn:
            exists, team = await teams.task_team(conn, agent_id, task_id)
        if exists:
            self.teams.keep(agent_id, task_id, team)
        return team

    def _bucket(self, subject: Subject, limits: Limits) -> Bucket:
        bucket = self.buckets.get(subject)
        if bucket is None:
            bucket = self.buckets[subject] = Bucket(*subject, limits, self._lease)
        bucket.limits = limits
        return bucket

    def _slots(self, subject: Subject) -> Slots:
        slot = self.slots.get(subject)
        if slot is None:
            slot = self.slots[subject] = Slots(*subject, self._grow)
        return slot

    async def _lease(self, kind: Kind, name: str, limits: Limits, want: int) -> tuple[int, float]:
        async with self.gw.connection() as conn:
            return await buckets.lease(conn, kind, name, limits, want)

    async def _grow(self, kind: Kind, name: str, to: int, cap: int) -> bool:
        async with self.gw.connection() as conn:
            return await slots.grow(conn, kind, name, self.holder, to, cap)

    # -- the loop beside the requests --

    async def start(self) -> None:
        """Read the overrides, then keep them, the slot leases and the buckets current."""
        with suppress(DatabaseUnavailable):
            await self.refresh()
        self._loop = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the loop and give back the slots this process holds."""
        await cancel_and_wait(self._loop)
        if self.slots:
            with suppress(DatabaseUnavailable):
                async with self.gw.connection() as conn:
                    await slots.release_all(conn, self.holder)

    async def refresh(self) -> None:
        """Read every override (what another replica's admin changed applies here)."""
        async with self.gw.connection() as conn:
            self.overrides = await load_overrides(conn)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.gw.settings.limit_poll_s)
            try:
                await self.refresh()
                await self.tidy(asyncio.get_running_loop().time())
            except DatabaseUnavailable:
                continue
            except Exception:
                log.exception("the limits loop failed; it goes on")

    async def tidy(self, now: float) -> None:
        """Give back spare slots, renew the holdings, forget idle buckets."""
        for subject, slot in list(self.slots.items()):
            keep = slot.spare(now)
            if keep is None:
                continue
            slot.held, slot.spare_since = keep, 0.0
            async with self.gw.connection() as conn:
                await slots.shrink(conn, *subject, self.holder, keep)
            if slot.held == 0 and slot.busy == 0:
                del self.slots[subject]
        if self.slots and now - self.renewed_at >= slots.RENEW_S:
            async with self.gw.connection() as conn:
                await slots.renew(conn, self.holder)
            self.renewed_at = now
        for subject, bucket in list(self.buckets.items()):
            if now - bucket.used_at > IDLE_S and bucket.pending is None:
                del self.buckets[subject]
