"""What synchronous replication costs (drill 0 of scripts/compose_failover_smoke.py): the
p50 of sequential follow-ups, and of one-row commits on the primary, with Patroni's
synchronous mode on and off (`patronictl edit-config`), in alternating rounds."""

from __future__ import annotations

import asyncio
import statistics
import time

import aiohttp
import asyncpg
from failover_load import DSN, Figures, SmokeFailure, follow_up, leader, patronictl, start

LATENCY_SAMPLES = 30
LATENCY_ROUNDS = 3
COMMIT_SAMPLES = 100


async def latencies(session: aiohttp.ClientSession, agent: str) -> list[float]:
    """LATENCY_SAMPLES sequential follow-ups, each in milliseconds."""
    figures = Figures()
    took = []
    for n in range(LATENCY_SAMPLES):
        task = await start(session, figures, agent, f"latency {n}?")
        began = time.monotonic()
        await follow_up(session, figures, agent, task)
        took.append((time.monotonic() - began) * 1000)
    return took


async def commits() -> list[float]:
    """COMMIT_SAMPLES one-row commits on the primary (a table of the smoke's), in ms."""
    conn = await asyncpg.connect(DSN, timeout=10)
    took = []
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS smoke_commits (n integer)")
        for n in range(COMMIT_SAMPLES):
            began = time.monotonic()
            await conn.execute("INSERT INTO smoke_commits VALUES ($1)", n)
            took.append((time.monotonic() - began) * 1000)
    finally:
        await conn.close()
    return took


async def sync_names() -> str:
    conn = await asyncpg.connect(DSN, timeout=10)
    try:
        return str(await conn.fetchval("SHOW synchronous_standby_names"))
    finally:
        await conn.close()


async def set_sync(node: str, off: bool) -> None:
    """Synchronous replication on or off (``off``: turn it off), once the primary shows it."""
    if (await sync_names() == "") == off:
        return
    value = "false" if off else "true"
    patronictl(
        node,
        "edit-config",
        "--force",
        "-s",
        f"synchronous_mode={value}",
        "-s",
        f"synchronous_mode_strict={value}",
    )
    for _ in range(100):
        if (await sync_names() == "") == off:
            return
        await asyncio.sleep(0.3)
    raise SmokeFailure(f"synchronous_mode={value} not applied after 30 s")


async def sync_cost(session: aiohttp.ClientSession, agent: str) -> None:
    """Follow-ups and bare commits timed with synchronous replication and without, in
    alternating rounds (the machine's noise falls on both)."""
    print("== 0. a follow-up's latency with and without synchronous replication")
    node = leader()
    assert node is not None
    names = await sync_names()
    timed: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
    for _ in range(LATENCY_ROUNDS):
        for sync in (True, False):
            await set_sync(node, off=not sync)
            timed[sync][0].extend(await latencies(session, agent))
            timed[sync][1].extend(await commits())
    await set_sync(node, off=False)
    p50 = {sync: [statistics.median(t) for t in timed[sync]] for sync in timed}
    samples = LATENCY_ROUNDS * LATENCY_SAMPLES
    print(
        f"   synchronous (standby {names!r}): follow-up p50 {p50[True][0]:.1f} ms,"
        f" a one-row commit p50 {p50[True][1]:.2f} ms"
    )
    print(
        f"   asynchronous: follow-up p50 {p50[False][0]:.1f} ms,"
        f" a one-row commit p50 {p50[False][1]:.2f} ms"
    )
    print(
        f"   synchronous replication costs {p50[True][0] - p50[False][0]:+.1f} ms a follow-up,"
        f" {p50[True][1] - p50[False][1]:+.2f} ms a commit ({samples} sequential follow-ups and"
        f" {LATENCY_ROUNDS * COMMIT_SAMPLES} commits each way, {LATENCY_ROUNDS} alternating rounds)"
    )
