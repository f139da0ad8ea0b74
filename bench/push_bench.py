"""Benchmark of push notifications (SPEC §12): delivery latency, and what push costs the
follow-up.

Four processes: the 1.0 agent of ``continue_bench.py`` (answers at once), the gateway (the
real ``a2a-continue serve``), the webhook receiver (an aiohttp app that answers 200 at once
and notes when each delivery arrived) and this script as the load generator.
- Delivery latency: follow-ups at a steady rate (default 100 events/s) on tasks that each
  have a push config; for each delivery, from the moment its event was recorded (the
  event's time, in PostgreSQL's clock, which its delivery row keeps) to the moment the
  receiver got it (this machine's clock, the same one): p50 and p99 (target p99 <= 50 ms).
- Hot path: follow-up throughput at concurrency 16 on tasks with a push config each, next
  to tasks without (9 interleaved pairs of rounds, in turn order: the median of the pairs'
  ratios), with the
  dispatcher sending (no target: on two shared cores it measures the receiver's and the
  sender's own work too) and with dispatch off (the request path alone, target >= x0.97);
  and what the dispatching rounds cost per follow-up in CPU (medians): the gateway (its
  dispatcher included), PostgreSQL (target with push <= x1.25 of without, the median of the
  pairs' ratios) and the receiver.
Usage:
    python bench/push_bench.py [--rate 100] [--seconds 10] [--requests 2000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from continue_bench import (
    cpu_seconds,
    database,
    free_port,
    percentile,
    postgres_cpu,
    process,
    timed,
    wait_listening,
)

ROOT = Path(__file__).resolve().parent.parent
TASKS = 16
ROUNDS = 9


def run_receiver(port: int) -> None:
    """Serve the webhook (POST /hook) and when each delivery id arrived (GET /arrivals)."""
    import msgspec
    import uvloop

    arrived: dict[str, float] = {}

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        arrived.setdefault(request.headers["A2A-Delivery-Id"], time.time())
        return web.Response(status=200)

    async def arrivals(request: web.Request) -> web.Response:
        return web.Response(body=msgspec.json.encode(arrived), content_type="application/json")

    async def serve() -> None:
        app = web.Application()
        app.router.add_post("/hook", hook)
        app.router.add_get("/arrivals", arrivals)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    uvloop.run(serve())


async def _post(http: aiohttp.ClientSession, url: str, body: Any, auth: dict[str, str]) -> Any:
    async with http.post(url, json=body, headers=auth) as r:
        if r.status >= 300:
            raise RuntimeError(f"{url}: {r.status} {await r.text()}")
        return await r.json(content_type=None)


async def _tasks(
    http: aiohttp.ClientSession, base: str, agent: str, auth: dict[str, str], hook: str | None
) -> list[str]:
    """Start TASKS tasks (each with a 0.3 push config when ``hook``: one delivery per event)."""
    found = []
    for _ in range(TASKS):
        answer = await _post(http, f"{base}/v1/a2a/{agent}/messages", {"text": "hi"}, auth)
        task = answer["result"]["task"]["id"]
        if hook is not None:
            config = {"url": hook, "version": "0.3"}
            await _post(http, f"{base}/v1/a2a/{agent}/tasks/{task}/push-configs", config, auth)
        found.append(task)
    return found


async def latency(
    http: aiohttp.ClientSession,
    follow: list[str],
    auth: dict[str, str],
    receiver: str,
    rate: float,
    seconds: float,
    db_url: str,
) -> tuple[float, float, int]:
    """Follow-ups at ``rate``/s for ``seconds``; p50/p99 of event recorded → received (ms)."""
    import asyncpg

    free: asyncio.Queue[str] = asyncio.Queue()
    for url in follow:
        free.put_nowait(url)
    began = time.perf_counter()
    sent = 0
    running: set[asyncio.Task[None]] = set()

    async def one() -> None:
        url = await free.get()
        try:
            async with http.post(url, data=b'{"text":"x"}', headers=auth) as r:
                await r.read()
        finally:
            free.put_nowait(url)

    total = int(rate * seconds)
    while sent < total:
        due = began + sent / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one())
        running.add(task)
        task.add_done_callback(running.discard)
        sent += 1
    await asyncio.gather(*running)
    conn = await asyncpg.connect(db_url)
    try:
        for _ in range(600):
            rows = await conn.fetch(
                "SELECT id::text, extract(epoch FROM created_at) AS at FROM a2a_push_deliveries"
            )
            async with http.get(receiver + "/arrivals") as r:
                arrived = await r.json()
            if len(rows) >= total and all(r["id"] in arrived for r in rows):
                break
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    waits = sorted(max(0.0, arrived[r["id"]] - float(r["at"])) for r in rows)
    return percentile(waits, 0.50), percentile(waits, 0.99), len(waits)


@dataclass(frozen=True)
class Meters:
    """Whose CPU a round is charged with: the gateway, PostgreSQL (its postmaster, or None for
    every PostgreSQL process of the machine) and the webhook receiver."""

    gateway: int
    postmaster: int | None
    receiver: int

    def read(self) -> tuple[float, float, float]:
        return (
            cpu_seconds(self.gateway),
            postgres_cpu(self.postmaster),
            cpu_seconds(self.receiver),
        )


@dataclass
class Round:
    """One throughput round: follow-ups per second, and CPU ms per follow-up of each."""

    rps: float
    cpu: tuple[float, float, float]


async def throughput(
    http: aiohttp.ClientSession, follow: list[str], auth: dict[str, str], n: int, meters: Meters
) -> Round:
    """Follow-ups per second at concurrency 16 (one task per worker), and the CPU they cost."""

    async def call(worker: int) -> None:
        async with http.post(follow[worker], data=b'{"text":"x"}', headers=auth) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"follow-up: {r.status}")

    await timed(min(n // 4, 200), TASKS, call)
    before = meters.read()
    began = time.perf_counter()
    await timed(n, TASKS, call)
    rps = n / (time.perf_counter() - began)
    used = (a - b for a, b in zip(meters.read(), before, strict=True))
    per = tuple(u * 1000 / n for u in used)
    return Round(rps, (per[0], per[1], per[2]))


async def drained(db_url: str) -> None:
    """Wait until no delivery is pending (a round's deliveries are not the next round's)."""
    import asyncpg

    from a2a_continue.core.push.outbox import COUNT_PENDING

    conn = await asyncpg.connect(db_url)
    try:
        for _ in range(600):
            if not await conn.fetchval(COUNT_PENDING):
                return
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def measure(
    args: argparse.Namespace,
    urls: dict[str, str],
    token: str,
    db: str,
    with_latency: bool,
    meters: Meters,
) -> dict[str, Any]:
    """The latency (when asked) and the best throughput with and without push configs."""
    hook = urls["hook"] + "/hook"
    auth = {"Authorization": f"Bearer {token}"}
    base = urls["gateway"]
    found: dict[str, Any] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as http:
        reg = {"name": "bench", "endpointUrl": urls["agent"] + "/", "protocolVersion": "1.0"}
        agent = (await _post(http, base + "/v1/a2a/agents", reg, auth))["id"]

        def follow(tasks: list[str]) -> list[str]:
            return [f"{base}/v1/a2a/{agent}/tasks/{t}/messages" for t in tasks]

        pushed = follow(await _tasks(http, base, agent, auth, hook))
        plain = follow(await _tasks(http, base, agent, auth, None))
        if with_latency:
            p50, p99, count = await latency(
                http, pushed, auth, urls["hook"], args.rate, args.seconds, db
            )
            found.update(p50=p50, p99=p99, count=count)
        without: list[Round] = []
        with_push: list[Round] = []
        for i in range(ROUNDS):
            # Each pair in turn order (A B, B A, ...): a drift within a run (tables growing, a
            # checkpoint) does not always fall on the same side.
            for side in ("without", "with") if i % 2 == 0 else ("with", "without"):
                if side == "without":
                    without.append(await throughput(http, plain, auth, args.requests, meters))
                else:
                    with_push.append(await throughput(http, pushed, auth, args.requests, meters))
            if with_latency:  # deliveries are sent: let this round's reach the receiver
                await drained(db)
    # Each figure is the median over the interleaved pairs (a pair's two rounds ran back to
    # back, so a ratio within a pair does not see the machine's drift between pairs).
    pairs = list(zip(without, with_push, strict=True))
    found.update(
        without=median(r.rps for r in without),
        with_push=median(r.rps for r in with_push),
        ratio=median(w.rps / o.rps for o, w in pairs),
        db_ratio=median(w.cpu[1] / o.cpu[1] for o, w in pairs),
        cpu=tuple(
            tuple(median(r.cpu[i] for r in side) for i in range(3)) for side in (without, with_push)
        ),
    )
    return found


def main() -> None:
    """Start the agent and the gateway; measure; print the line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=100.0, help="events per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--requests", type=int, default=2000, help="per throughput round")
    parser.add_argument("--quick", action="store_true", help="3 s of events, 300 requests")
    parser.add_argument("--role", choices=["receiver"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "receiver":
        return run_receiver(args.port)
    if args.quick:
        args.seconds, args.requests = 3.0, 300

    from a2a_continue.core.access.callers import mint_token
    from a2a_continue.core.schema import migrate_url
    from a2a_continue.runtime.secrets import new_key

    ports = {name: free_port() for name in ("agent", "gateway", "hook")}
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    secret = new_key() + new_key()
    with ExitStack() as stack:
        url, postmaster = stack.enter_context(database())
        asyncio.run(migrate_url(url))
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="a2ac-push-bench-")))
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "A2AC_DATABASE_URL": url,
            "A2AC_JWT_SECRET": secret,
            "A2AC_ENCRYPTION_KEY": new_key(),
            "A2AC_HOST": "127.0.0.1",
            "A2AC_PORT": str(ports["gateway"]),
        }
        agent_cmd = [sys.executable, str(ROOT / "bench" / "continue_bench.py"), "--role", "agent"]
        agent = stack.enter_context(
            process([*agent_cmd, "--port", str(ports["agent"])], env, logs / "agent")
        )
        receiver = stack.enter_context(
            process(
                [sys.executable, __file__, "--role", "receiver", "--port", str(ports["hook"])],
                env,
                logs / "receiver",
            )
        )
        token = mint_token(secret, "bench@example.com", ["*"])
        import uvloop

        def phase(dispatch: bool) -> dict[str, Any]:
            """Run one gateway (dispatching or not) and measure through it."""
            gateway_env = {**env, "A2AC_PUSH_DISPATCH": "true" if dispatch else "false"}
            name = "gateway" if dispatch else "gateway-no-dispatch"
            with process(
                [sys.executable, "-m", "a2a_continue", "serve"], gateway_env, logs / name
            ) as gateway:
                meters = Meters(gateway.pid, postmaster, receiver.pid)

                async def run() -> dict[str, Any]:
                    async with aiohttp.ClientSession() as http:
                        await wait_listening(urls["gateway"] + "/healthz", http, gateway)
                        await wait_listening(urls["agent"] + "/", http, agent)
                        await wait_listening(urls["hook"] + "/arrivals", http, agent)
                    return await measure(args, urls, token, url, dispatch, meters)

                return uvloop.run(run())

        sent = phase(dispatch=True)
        enqueued = phase(dispatch=False)
        print(
            f"push: delivery latency p50 {sent['p50']:.1f} ms, p99 {sent['p99']:.1f} ms at"
            f" {args.rate:g} events/s ({sent['count']:.0f} deliveries, target p99 <= 50 ms);"
            f" follow-up c=16 with a push config on every task, request path alone (dispatch"
            f" off): x{enqueued['ratio']:.2f} (target >= x0.97), dispatching:"
            f" {sent['with_push']:.0f} req/s vs {sent['without']:.0f} without"
            f" (x{sent['ratio']:.2f}); PostgreSQL CPU per follow-up with push, dispatch"
            f" included: x{sent['db_ratio']:.2f} (target <= x1.25); CPU ms per follow-up with /"
            f" without push: {_cpu(sent['cpu'])}; medians of {ROUNDS} interleaved pairs"
        )


def _cpu(rounds: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    (gw0, db0, rc0), (gw1, db1, rc1) = rounds
    return (
        f"gateway {gw1:.3f} / {gw0:.3f}, PostgreSQL {db1:.3f} / {db0:.3f},"
        f" receiver {rc1:.3f} / {rc0:.3f}"
    )


if __name__ == "__main__":
    main()
