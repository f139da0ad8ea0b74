"""The drills of `make compose-failover-smoke`, against docker-compose.failover.yml brought up
by scripts/compose_failover_smoke.sh (requests straight to the two gateway replicas, turn
about; the audit's queries through HAProxy to the primary):

0. a follow-up's latency and a bare commit's, p50 of sequential ones, with synchronous
   replication and without (`patronictl edit-config`), in alternating rounds;
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
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from failover_audit import audit
from failover_latency import sync_cost
from failover_load import (
    AGENT_URL,
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


@dataclass
class Load:
    """The steady load of one drill."""

    agent: str
    slow: str
    receiver: Receiver
    figures: Figures = field(default_factory=Figures)
    configs: dict[str, str] = field(default_factory=dict)  # task -> push config
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    probes: list[tuple[float, float, int]] = field(default_factory=list)  # sent, done, status

    async def probe(self, session: aiohttp.ClientSession) -> None:
        """A start under a fresh key every 0.2 s, one attempt each, each on its own: when
        writes are taken again, whatever the clients' retries wait on."""
        sent: list[asyncio.Task[None]] = []
        n = 0
        while not self.stop.is_set():
            n += 1
            sent.append(asyncio.create_task(self.one_probe(session, n)))
            await asyncio.sleep(0.2)
        await asyncio.gather(*sent)

    async def one_probe(self, session: aiohttp.ClientSession, n: int) -> None:
        sent = time.monotonic()
        try:
            status, _, _ = await call(
                session,
                "POST",
                f"/v1/a2a/{self.agent}/messages",
                {"text": f"probe {n}?"},
                {"Idempotency-Key": os.urandom(16).hex()},
                base=self.figures.base(),
            )
        except (TimeoutError, aiohttp.ClientError):
            status = 0
        if status == 500:
            self.figures.statuses["500"] += 1
        self.probes.append((sent, time.monotonic(), status))

    def written_since(self, when: float) -> bool:
        return any(sent >= when and status == 200 for sent, _, status in self.probes)

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
    prober = asyncio.create_task(load.probe(session))
    await asyncio.sleep(4)
    what = await asyncio.to_thread(fault)
    faulted = time.monotonic()
    print(f"   fault: {what}")
    after = await asyncio.to_thread(settled)
    print(f"   {after} ({time.monotonic() - faulted:.1f} s after the fault)")
    for _ in range(300):  # until a probe sent after the fault is answered (60 s at most)
        if load.written_since(faulted):
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(4)
    load.stop.set()
    await asyncio.gather(*runners)
    await feeder
    await prober
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
    probed = [
        done - faulted for sent, done, status in load.probes if sent >= faulted and status == 200
    ]
    recovery = f"{min(probed):.2f} s" if probed else "none"
    clients = f"{min(first):.2f} s" if first else "none"
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(load.figures.statuses.items()))
    probes = Counter(str(status or "connection error") for _, _, status in load.probes)
    print(
        f"   first successful write sent after the fault: {recovery} after it (a probe's);"
        f" the clients' first, retries included: {clients}"
    )
    print(f"   requests by status: {{{statuses}}}")
    print(f"   probes by status: {{{', '.join(f'{k}: {v}' for k, v in sorted(probes.items()))}}}")
    lines = await audit(session, load, streams, watched)
    lines.insert(0, (bool(probed), f"a write sent after the fault succeeded: {recovery}"))
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
