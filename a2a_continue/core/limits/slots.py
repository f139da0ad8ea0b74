"""In-flight caps held for the cluster: each process holds a number of a subject's slots in
``a2a_limit_slots`` (a row per process and subject, a lease that expires unless renewed) and
counts its own calls against what it holds.

A process grows its holding by one slot when every slot it holds is busy, and only while the
sum over the live holdings stays within the cap; spare slots go back after a second. At a
steady concurrency nothing reaches the database; a process that died frees its slots when
its lease expires.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from a2a_continue.core.limits.policy import Kind, TooManyInFlight
from a2a_continue.runtime.db import Conn

# How long a holding lasts unless renewed, and how often the holder renews it.
SLOT_LEASE_S = 30.0
RENEW_S = 10.0
# How long spare slots stay held before they go back.
SPARE_S = 1.0

_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('a2ac-slots:' || $1 || ':' || $2, 0))"
_GROW = """
INSERT INTO a2a_limit_slots (kind, name, holder, slots, expires_at)
SELECT $1::text, $2::text, $3::uuid, $4::int, now() + make_interval(secs => $6::float8)
WHERE (SELECT coalesce(sum(slots), 0) FROM a2a_limit_slots
       WHERE kind = $1 AND name = $2 AND holder <> $3 AND expires_at > now()) + $4::int <= $5::int
ON CONFLICT (kind, name, holder) DO UPDATE
    SET slots = EXCLUDED.slots, expires_at = EXCLUDED.expires_at
RETURNING slots
"""
_SHRINK = "UPDATE a2a_limit_slots SET slots = $4 WHERE kind = $1 AND name = $2 AND holder = $3"
_DROP = "DELETE FROM a2a_limit_slots WHERE kind = $1 AND name = $2 AND holder = $3"
_RENEW = (
    "UPDATE a2a_limit_slots SET expires_at = now() + make_interval(secs => $2) WHERE holder = $1"
)
_RELEASE_ALL = "DELETE FROM a2a_limit_slots WHERE holder = $1"


async def grow(conn: Conn, kind: Kind, name: str, holder: uuid.UUID, to: int, cap: int) -> bool:
    """Hold ``to`` slots of the subject if the cluster's holdings stay within ``cap``."""
    async with conn.transaction():
        # Serialize the growers of one subject; the next statement's snapshot sees them.
        await conn.execute(_LOCK, kind, name)
        held = await conn.fetchval(_GROW, kind, name, holder, to, cap, SLOT_LEASE_S)
    return held is not None


async def shrink(conn: Conn, kind: Kind, name: str, holder: uuid.UUID, to: int) -> None:
    """Hold only ``to`` slots of the subject (none: the row goes)."""
    if to > 0:
        await conn.execute(_SHRINK, kind, name, holder, to)
    else:
        await conn.execute(_DROP, kind, name, holder)


async def renew(conn: Conn, holder: uuid.UUID) -> None:
    """Extend every holding of this process."""
    await conn.execute(_RENEW, holder, SLOT_LEASE_S)


async def release_all(conn: Conn, holder: uuid.UUID) -> None:
    """Give back every slot this process holds (it is stopping)."""
    await conn.execute(_RELEASE_ALL, holder)


# What grows a holding: (kind, name, to, cap) → granted, through a pooled connection.
Grower = Callable[[Kind, str, int, int], Awaitable[bool]]


class Slots:
    """This process's calls in flight for one subject, and the slots it holds for them."""

    def __init__(self, kind: Kind, name: str, grower: Grower) -> None:
        self.kind, self.name, self.grower = kind, name, grower
        self.busy = 0
        self.held = 0
        self.spare_since = 0.0
        self.growing: asyncio.Lock = asyncio.Lock()

    async def take(self, cap: int) -> None:
        """Count one call in flight, or raise TooManyInFlight (429) / DatabaseUnavailable."""
        if self.busy >= cap:
            raise TooManyInFlight(self.kind, cap)
        if self.busy >= self.held:
            async with self.growing:
                if self.busy >= self.held:
                    if not await self.grower(self.kind, self.name, self.busy + 1, cap):
                        raise TooManyInFlight(self.kind, cap)
                    self.held = self.busy + 1
        self.busy += 1

    def give(self) -> None:
        """Count a call that ended."""
        self.busy -= 1
        if self.busy < self.held and not self.spare_since:
            self.spare_since = asyncio.get_running_loop().time()

    def spare(self, now: float) -> int | None:
        """How many slots to keep when spare ones have waited long enough, else None."""
        if self.busy >= self.held:
            self.spare_since = 0.0
            return None
        if not self.spare_since or now - self.spare_since < SPARE_S or self.growing.locked():
            return None
        return self.busy
