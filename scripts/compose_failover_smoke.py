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
from failover_audit import audit
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
