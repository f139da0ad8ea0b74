"""The audit of one failover drill (scripts/compose_failover_smoke.py): every follow-up
answered 200 has its event row (read on the primary), no event twice, no stream gap, every
watched task to the end of its turn, every push delivery received (repeats only under one
A2A-Delivery-Id), no 500, no 503 without Retry-After."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import aiohttp
import asyncpg
from failover_load import DSN, call
from failover_streams import Stream

if TYPE_CHECKING:
    from compose_failover_smoke import Load

RECORDED_WITHIN_S = 25


async def event_counts(tasks: list[str]) -> dict[str, dict[str, int]]:
    """Each task's events by type, read on the primary."""
    conn = await asyncpg.connect(DSN, timeout=10)
    try:
        rows = await conn.fetch(
            "SELECT t.task_id, e.type, count(*) AS n FROM a2a_tasks t"
            " JOIN a2a_task_events e ON e.task = t.id WHERE t.task_id = ANY($1::text[])"
            " GROUP BY t.task_id, e.type",
            tasks,
        )
    finally:
        await conn.close()
    counts: dict[str, dict[str, int]] = {task: {} for task in tasks}
    for row in rows:
        counts[row["task_id"]][row["type"]] = row["n"]
    return counts


async def recorded(followed: list[str]) -> dict[str, dict[str, int]]:
    """The events of every follow-up answered 200, once each has its row (an answer the
    outage kept from being recorded is recorded afterwards) or the bound has passed."""
    end = time.monotonic() + RECORDED_WITHIN_S
    while True:
        counts = await event_counts(followed)
        if all(c.get("task_continued") for c in counts.values()) or time.monotonic() > end:
            return counts
        await asyncio.sleep(0.5)


async def pushes_audit(
    session: aiohttp.ClientSession, load: Load, agents: dict[str, str]
) -> tuple[int, int, int, list[str]]:
    """Every delivery of every config delivered and received, each event under one delivery
    id. Return deliveries, received (with repeats), repeats, and what failed."""
    deliveries = received = repeats = 0
    failed: list[str] = []
    for task, config in load.configs.items():
        path = f"/v1/a2a/{agents[task]}/tasks/{task}/push-configs/{config}/deliveries"
        end = time.monotonic() + 60
        while True:
            status, data, _ = await call(session, "GET", path)
            states = [d["state"] for d in data["deliveries"]] if status == 200 else []
            if (states and all(s == "delivered" for s in states)) or time.monotonic() > end:
                break
            await asyncio.sleep(0.5)
        if status != 200 or not states or any(s != "delivered" for s in states):
            failed.append(f"{task}: deliveries {status} {states}")
            continue
        seqs = [d["seq"] for d in data["deliveries"]]
        if len(seqs) != len(set(seqs)):
            failed.append(f"{task}: an event delivered under two ids {seqs}")
        for d in data["deliveries"]:
            deliveries += 1
            got = load.receiver.got.get(d["id"], 0)
            received += got
            repeats += max(got - 1, 0)
            if not got:
                failed.append(f"{task}: delivery {d['id']} never received")
    return deliveries, received, repeats, failed


async def audit(
    session: aiohttp.ClientSession,
    load: Load,
    streams: list[Stream],
    watched: list[str],
) -> list[tuple[bool, str]]:
    figures = load.figures
    lines: list[tuple[bool, str]] = []
    followed = sorted(figures.followed)
    counts = await recorded(followed)
    missing = [t for t, c in counts.items() if not c.get("task_continued")]
    doubled = [t for t, c in counts.items() if any(n > 1 for n in c.values())]
    lines.append(
        (
            not missing,
            f"follow-ups answered 200 with their event row:"
            f" {len(followed) - len(missing)}/{len(followed)} {missing[:3]}",
        )
    )
    taken_over = sum(1 for c in counts.values() if c.get("task_continue_failed"))
    lines.append(
        (
            True,
            f"claims whose commit's answer the fault lost, expired and taken over by the"
            f" retry (logged claim-expired): {taken_over}",
        )
    )
    lines.append((not doubled, f"duplicated events: {len(doubled)} {doubled[:3]}"))
    gaps = [s.task for s in streams if not s.contiguous()]
    resumed = sum(s.resumes for s in streams)
    lines.append(
        (
            not gaps,
            f"stream gaps: {len(gaps)} ({len(streams)} streams, {sum(len(s.seqs) for s in streams)}"
            f" events, {resumed} resumes with Last-Event-ID) {gaps[:3]}",
        )
    )
    agents = {t: load.agent for t in load.configs} | {t: load.slow for t in watched}
    late = []
    for task in watched:
        status, data, _ = await call(session, "GET", f"/v1/a2a/{load.slow}/tasks/{task}")
        if status != 200 or data["state"] != "input-required":
            late.append(task)
    lines.append(
        (
            not late,
            f"watched tasks to the end of their turn: {len(watched) - len(late)}/{len(watched)}",
        )
    )
    deliveries, received, repeats, failed = await pushes_audit(session, load, agents)
    lines.append(
        (
            not failed,
            f"push deliveries received: {deliveries - len([f for f in failed if 'never' in f])}"
            f"/{deliveries} ({len(load.configs)} configs, {received} received,"
            f" {repeats} repeats under their own A2A-Delivery-Id) {failed[:3]}",
        )
    )
    lines.append((figures.statuses.get("500", 0) == 0, f"500s: {figures.statuses.get('500', 0)}"))
    lines.append(
        (figures.no_retry_after == 0, f"503s without Retry-After: {figures.no_retry_after}")
    )
    return lines
