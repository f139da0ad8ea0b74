"""Token buckets held for the cluster: ``a2a_limit_buckets`` holds each bucket, and a process
takes tokens from it a lease at a time, then spends them without asking again.

Every token a process admits with was taken from the database first, so the cluster admits
at most the bucket's budget plus what the replicas hold unspent: one lease each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from a2a_continue.core.limits.policy import Kind, Limits, RateLimited
from a2a_continue.errors import DatabaseUnavailable
from a2a_continue.runtime.db import Conn

# One statement per lease: refill the bucket by the time since its last refill (computed by
# the server, after the row is locked), take up to $4 whole tokens of what is there, keep
# the rest. A bucket seen for the first time starts full.
_ELAPSED = "extract(epoch FROM clock_timestamp() - b.refilled_at)::float8"
_AVAILABLE = f"least($3::float8, b.tokens + $5::float8 * greatest(0, {_ELAPSED}))"
LEASE = f"""
INSERT INTO a2a_limit_buckets AS b (kind, name, tokens, granted, refilled_at)
VALUES ($1, $2, $3::float8 - least($4::int, floor($3::float8)),
        least($4::int, floor($3::float8))::int, clock_timestamp())
ON CONFLICT (kind, name) DO UPDATE SET
    granted = least($4::int, floor({_AVAILABLE}))::int,
    tokens = {_AVAILABLE} - least($4::int, floor({_AVAILABLE})),
    refilled_at = clock_timestamp()
RETURNING granted, tokens
"""


async def lease(conn: Conn, kind: Kind, name: str, limits: Limits, want: int) -> tuple[int, float]:
    """Take up to ``want`` tokens of the subject's bucket: (tokens taken, fraction left)."""
    row = await conn.fetchrow(LEASE, kind, name, float(limits.size), want, float(limits.rps or 0))
    assert row is not None
    return int(row["granted"]), float(row["tokens"])


# How many tokens a dripping bucket may spend at once when requests came late.
DRIP_SLACK = 2

# What runs a lease: (kind, name, limits, want) → (taken, left), through a pooled connection.
Leaser = Callable[[Kind, str, Limits, int], Awaitable[tuple[int, float]]]


class Bucket:
    """The tokens this process holds of one subject's bucket.

    A request spends one it holds; when half a lease is left the next lease is taken in the
    background, so a caller within its rate rarely waits on the database. A drained bucket
    refuses locally until a whole lease can have come back, so a flood costs the database one
    statement per lease, and spends what it leased at the rate (``drip``), one token every
    1/rps, as a bucket asked continuously would have admitted them: not all at once.
    """

    def __init__(self, kind: Kind, name: str, limits: Limits, leaser: Leaser) -> None:
        self.kind, self.name, self.limits = kind, name, limits
        self.leaser = leaser
        self.held = 0
        self.empty_until = 0.0
        self.pending: asyncio.Task[None] | None = None
        self.unreachable = False
        self.used_at = 0.0
        self.dripping = False
        self.drip_at = 0.0

    async def take(self) -> None:
        """Spend one token, or raise RateLimited (429) or DatabaseUnavailable (503)."""
        loop = asyncio.get_running_loop()
        now = self.used_at = loop.time()
        if self.held <= 0:
            if now < self.empty_until:
                raise RateLimited(self.kind, self.limits, self.empty_until - now)
            await self._refill()
            if self.held <= 0:
                if self.unreachable:
                    raise DatabaseUnavailable()
                raise RateLimited(self.kind, self.limits, max(0.0, self.empty_until - now))
        if self.dripping and self.limits.rps:
            if now < self.drip_at:
                raise RateLimited(self.kind, self.limits, self.drip_at - now)
            interval = 1.0 / self.limits.rps
            self.drip_at = max(self.drip_at, now - DRIP_SLACK * interval) + interval
        self.held -= 1
        if self.held <= self.limits.lease // 2 and self.pending is None and now >= self.empty_until:
            self.pending = loop.create_task(self._lease())

    def give_back(self) -> None:
        """Return a token spent by a request another limit refused."""
        self.held += 1

    async def _refill(self) -> None:
        if self.pending is None:
            self.pending = asyncio.get_running_loop().create_task(self._lease())
        await asyncio.shield(self.pending)

    async def _lease(self) -> None:
        try:
            want = self.limits.lease
            taken, left = await self.leaser(self.kind, self.name, self.limits, want)
            self.unreachable = False
            self.held += taken
            # Drip while the bucket is drained; a lease that leaves a whole lease behind ends it.
            self.dripping = (self.dripping and left < want) or taken < want
            if taken < want and self.limits.rps:
                # The bucket is drained: ask again once a whole lease can have come back, so a
                # caller past its rate costs one statement per lease, not one per token.
                wait = (min(want, self.limits.size) - min(left, 1.0)) / self.limits.rps
                self.empty_until = asyncio.get_running_loop().time() + wait
        except DatabaseUnavailable:
            self.unreachable = True
        finally:
            self.pending = None
