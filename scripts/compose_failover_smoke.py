"""The drills of `make compose-failover-smoke`, against docker-compose.failover.yml brought up
by scripts/compose_failover_smoke.sh (requests straight to the two gateway replicas, turn
about; the audit's queries through HAProxy to the primary):

0. a follow-up's latency, p50 of sequential follow-ups, with synchronous replication and
   without (`patronictl edit-config`), then synchronous again;
1. the primary's postgres SIGKILLed (Patroni promotes the synchronous standby; the old
   primary's node is stopped once it is replaced, to rejoin in drill 3);
2. a planned `patronictl switchover` to the other node;
3. the old primary of drill 1 started again: it rejoins as a replica.

Each drill runs under steady load: clients doing start + follow-up with Idempotency-Key,
retrying 502, 503, 504, an in-flight key and connection errors; 50 live event streams
(resumed with Last-Event-ID when cut); tasks the gateways watch (a slow agent); push configs
on some tasks, delivered to a receiver here. It prints the seconds from the fault to the
first successful write sent after it, the requests by status, and the audit; any audit line
failing fails the smoke. Environment (set by the shell script): FO_COMPOSE, FO_JWT_SECRET,
FO_RUN and the FO_* ports of the override.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import asyncpg
from failover_load import (
    AGENT_URL,
    DSN,
    SLOW_AGENT_URL,
    Figures,
    Receiver,
    SmokeFailure,
    call,
    check,
    compose,
    follow_up,
    healthy_replicas,
    leader,
    members_line,
    patronictl,
    push_config,
    register,
    start,
    wait_until,
)
from failover_streams import Stream, open_streams

CLIENTS = 6
STREAMS = 50
WATCHED = 6
PUSH_EVERY = 4  # a push config on every 4th task of the load
LATENCY_SAMPLES = 40
RECORDED_WITHIN_S = 25


@dataclass
class Load:
    """The steady load of one drill."""

    agent: str
    slow: str
    receiver: Receiver
    figures: Figures = field(default_factory=Figures)
    configs: dict[str, str] = field(default_factory=dict)  # task -> push config
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def client(self, session: aiohttp.ClientSession, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            task = await start(session, self.figures, self.agent, f"c{n} {i}?")
            self.figures.tasks.append(task)
            if i % PUSH_EVERY == 0:
                self.configs[task] = await push_config(
                    session, self.figures, self.agent, task, self.receiver.url
                )
            await follow_up(session, self.figures, self.agent, task)

    async def feed(self, session: aiohttp.ClientSession, streams: list[Stream]) -> None:
        """Follow up the streamed tasks one by one through the drill."""
        for stream in streams:
            if self.stop.is_set():
                break
            await follow_up(session, self.figures, self.agent, stream.task)
            await asyncio.sleep(0.4)

    async def watched(self, session: aiohttp.ClientSession) -> list[str]:
        """Tasks of the slow agent answered at once: the gateways watch them to the end of
        their turn (input-required), with a push config each."""
        tasks = []
        for n in range(WATCHED):
            status, data, _ = await call(
                session,
                "POST",
                f"/v1/a2a/{self.slow}/messages",
                {"text": f"slow {n}?", "configuration": {"returnImmediately": True}},
                base=self.figures.base(),
            )
            check(status == 200, f"watched start: {status} {data}")
            task = str(data["result"]["task"]["id"])
            self.configs[task] = await push_config(
                session, self.figures, self.slow, task, self.receiver.url
            )
            tasks.append(task)
        return tasks


# ---- the audit -------------------------------------------------------------------------------


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
            f" {len(followed) - len(missing)}/{len(followed)}",
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


# ---- the drills ------------------------------------------------------------------------------


async def drill(
    session: aiohttp.ClientSession,
    title: str,
    agent: str,
    slow: str,
    receiver: Receiver,
    fault: Callable[[], str],
    settled: Callable[[], str],
) -> bool:
    print(f"== {title}")
    began = time.monotonic()
    load = Load(agent, slow, receiver)
    streams = await open_streams(session, load.figures, agent, STREAMS)
    watched = await load.watched(session)
    runners = [asyncio.create_task(load.client(session, n)) for n in range(CLIENTS)]
    feeder = asyncio.create_task(load.feed(session, streams))
    await asyncio.sleep(4)
    what = await asyncio.to_thread(fault)
    faulted = time.monotonic()
    print(f"   fault: {what}")
    after = await asyncio.to_thread(settled)
    print(f"   {after} ({time.monotonic() - faulted:.1f} s after the fault)")
    await asyncio.sleep(4)
    load.stop.set()
    await asyncio.gather(*runners)
    await feeder
    # the streamed tasks the feeder had no time for: followed up now, so every stream ends
    for stream in streams:
        if stream.task not in load.figures.followed:
            await follow_up(session, load.figures, agent, stream.task)
    try:
        async with asyncio.timeout(90):
            await asyncio.gather(*(s.reader for s in streams if s.reader))
    except TimeoutError:
        pass  # the audit names the streams that did not end
    first = [
        done - faulted
        for sent, done, status, replayed in load.figures.writes
        if sent >= faulted and status in (200, 201) and not replayed
    ]
    recovery = f"{min(first):.2f} s" if first else "none"
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(load.figures.statuses.items()))
    print(f"   first successful write sent after the fault: {recovery} after it")
    print(f"   requests by status: {{{statuses}}}")
    lines = await audit(session, load, streams, watched)
    lines.insert(0, (bool(first), f"a write sent after the fault succeeded: {recovery}"))
    for ok, line in lines:
        print(f"   audit {'ok  ' if ok else 'FAIL'} {line}")
    print(f"   ({time.monotonic() - began:.1f} s)")
    return all(ok for ok, _ in lines)


def kill_primary() -> tuple[Callable[[], str], Callable[[], str], list[str]]:
    victim: list[str] = []

    def fault() -> str:
        node = leader()
        check(node is not None, "no leader before the kill")
        assert node is not None
        victim.append(node)
        compose(
            "exec",
            "-T",
            node,
            "sh",
            "-c",
            "kill -KILL $(head -1 /var/lib/postgresql/data/pgdata/postmaster.pid)",
        )
        return f"SIGKILL to the postmaster of {node} (the primary)"

    def settled() -> str:
        wait_until("new primary", lambda: leader() not in (None, victim[0]))
        new = leader()
        compose("stop", "--timeout", "20", victim[0])
        return f"{new} promoted; {victim[0]} stopped to rejoin later ({members_line()})"

    return fault, settled, victim


def switchover() -> tuple[Callable[[], str], Callable[[], str]]:
    old: list[str] = []

    def fault() -> str:
        node = leader()
        assert node is not None
        old.append(node)
        patronictl(node, "switchover", "--force")
        return f"patronictl switchover from {node}"

    def settled() -> str:
        wait_until("new primary", lambda: leader() not in (None, old[0]))
        wait_until("the old primary streaming", lambda: healthy_replicas() >= 1)
        return f"{leader()} primary, {old[0]} a replica ({members_line()})"

    return fault, settled


def rejoin(node: str) -> tuple[Callable[[], str], Callable[[], str]]:
    def fault() -> str:
        compose("start", node)
        return f"{node} (drill 1's primary) started again"

    def settled() -> str:
        wait_until(f"{node} streaming", lambda: healthy_replicas() >= 2, limit_s=120)
        return f"{node} rejoined as a replica ({members_line()})"

    return fault, settled


async def latency(session: aiohttp.ClientSession, agent: str) -> float:
    """The p50 of LATENCY_SAMPLES sequential follow-ups, in milliseconds."""
    figures = Figures()
    took = []
    for n in range(LATENCY_SAMPLES):
        task = await start(session, figures, agent, f"latency {n}?")
        began = time.monotonic()
        await follow_up(session, figures, agent, task)
        took.append((time.monotonic() - began) * 1000)
    return statistics.median(took)


async def sync_names() -> str:
    conn = await asyncpg.connect(DSN, timeout=10)
    try:
        return str(await conn.fetchval("SHOW synchronous_standby_names"))
    finally:
        await conn.close()


async def set_sync(node: str, off: bool) -> None:
    """Synchronous replication on or off (``off``: turn it off), once the primary shows it."""
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
    print("== 0. a follow-up's latency with and without synchronous replication")
    node = leader()
    assert node is not None
    with_sync = await latency(session, agent)
    names = await sync_names()
    await set_sync(node, off=True)
    without = await latency(session, agent)
    await set_sync(node, off=False)
    print(
        f"   synchronous_standby_names {names!r}: follow-up p50 {with_sync:.1f} ms"
        f" ({LATENCY_SAMPLES} sequential)"
    )
    print(
        f"   asynchronous: follow-up p50 {without:.1f} ms; synchronous costs"
        f" {with_sync - without:+.1f} ms a follow-up"
    )


async def drills() -> bool:
    receiver = Receiver()
    await receiver.start()
    async with aiohttp.ClientSession() as session:
        agent = await register(session, AGENT_URL, "weather")
        slow = await register(session, SLOW_AGENT_URL, "slow weather")
        print(f"   cluster: {members_line()}")
        await sync_cost(session, agent)
        kill, killed, victim = kill_primary()
        ok = await drill(
            session, "1. SIGKILL of the primary's postgres", agent, slow, receiver, kill, killed
        )
        fault, settled = switchover()
        ok &= await drill(session, "2. a planned switchover", agent, slow, receiver, fault, settled)
        fault, settled = rejoin(victim[0])
        ok &= await drill(
            session,
            "3. the old primary rejoining as a replica",
            agent,
            slow,
            receiver,
            fault,
            settled,
        )
    assert receiver.runner is not None
    await receiver.runner.cleanup()
    return ok


def main() -> int:
    try:
        wait_until("leader", lambda: leader() is not None and healthy_replicas() >= 2)
        ok = asyncio.run(drills())
    except SmokeFailure as exc:
        print(f"compose-failover-smoke: {exc}", file=sys.stderr)
        return 1
    if not ok:
        print("compose-failover-smoke: an audit line failed", file=sys.stderr)
        return 1
    print("compose-failover-smoke: every drill's audit held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
