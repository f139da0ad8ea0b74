"""Fair shares across replicas (SPEC §20): leases of tokens from PostgreSQL, the cluster's
bound, in-flight slots shared by processes, a process cut off from the database."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from typing import Any, cast

import asyncpg
import pytest

from a2a_continue.core.limits.limiter import Limiter
from a2a_continue.core.limits.policy import Limits, RateLimited, TooManyInFlight
from a2a_continue.errors import DatabaseUnavailable
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.settings import Settings
from tests.support.database import direct_url

CALLER = ("caller", "flood@example.com")


class Process:
    """What a limiter needs of a gateway: settings and loans of connections (counted), and
    a database that can be cut off."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool) -> None:
        self.settings, self.pool = settings, pool
        self.statements = 0
        self.down = False

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        if self.down:
            raise DatabaseUnavailable()
        self.statements += 1
        async with self.pool.acquire() as conn:
            yield conn


@pytest.fixture
async def pool(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[asyncpg.Pool]:
    assert settings.database_url
    async with asyncpg.create_pool(direct_url(settings.database_url), min_size=1) as made:
        yield made


def limiter_of(settings: Settings, pool: asyncpg.Pool, **limits: Any) -> tuple[Limiter, Process]:
    process = Process(settings, pool)
    limiter = Limiter(cast(Gateway, process))
    limiter.defaults = {"caller": Limits(**limits), "team": Limits()}
    return limiter, process


async def admitted(limiter: Limiter, tries: int) -> int:
    count = 0
    for _ in range(tries):
        try:
            (await limiter.admit([CALLER], inflight=False)).release()
            count += 1
        except RateLimited:
            pass
    return count


async def test_a_lease_takes_at_most_a_tenth_of_the_burst_in_one_statement(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    limiter, process = limiter_of(settings, pool, rps=0.001, burst=100)
    assert await admitted(limiter, 100) == 100
    # 100 tokens in leases of min(20, ceil(100 / 10)) = 10: ten statements.
    assert process.statements == 10
    assert await admitted(limiter, 50) == 0
    assert process.statements == 11  # an empty bucket refuses locally until a token is due


async def test_two_replicas_admit_within_the_cluster_bound(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    rps, burst = 50.0, 40
    one, _ = limiter_of(settings, pool, rps=rps, burst=burst)
    two, _ = limiter_of(settings, pool, rps=rps, burst=burst)
    loop = asyncio.get_running_loop()
    began = loop.time()
    counts = [0, 0]

    async def flood(limiter: Limiter, index: int) -> None:
        while loop.time() - began < 1.0:
            try:
                (await limiter.admit([CALLER], inflight=False)).release()
                counts[index] += 1
            except RateLimited:
                await asyncio.sleep(0.001)

    await asyncio.gather(flood(one, 0), flood(two, 1))
    elapsed = loop.time() - began
    lease = math.ceil(burst / 10)
    assert sum(counts) <= burst + rps * elapsed + 2 * lease
    assert sum(counts) >= burst + rps * 0.8 - 2 * lease  # and the budget is used
    assert min(counts) > 0


async def test_in_flight_slots_are_shared_by_the_replicas(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    one, _ = limiter_of(settings, pool, inflight=2)
    two, _ = limiter_of(settings, pool, inflight=2)
    first = await one.admit([CALLER], inflight=True)
    second = await two.admit([CALLER], inflight=True)
    with pytest.raises(TooManyInFlight):
        await one.admit([CALLER], inflight=True)
    with pytest.raises(TooManyInFlight):
        await two.admit([CALLER], inflight=True)
    first.release()
    # The slot one holds spare is one's until it goes back (after a second, by the loop).
    (await one.admit([CALLER], inflight=True)).release()
    await one.tidy(asyncio.get_running_loop().time() + 5)
    (await two.admit([CALLER], inflight=True)).release()
    second.release()


async def test_a_replica_cut_off_spends_what_it_holds_then_answers_503(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    limiter, process = limiter_of(settings, pool, rps=1000.0, burst=100)
    assert await admitted(limiter, 1) == 1
    while limiter.buckets[CALLER].pending is not None:
        await limiter.buckets[CALLER].pending
    held = limiter.buckets[CALLER].held
    assert held > 0
    process.down = True
    assert await admitted(limiter, held) == held
    for _ in range(3):
        with pytest.raises(DatabaseUnavailable):
            await limiter.admit([CALLER], inflight=False)
    process.down = False
    assert await admitted(limiter, 1) == 1
