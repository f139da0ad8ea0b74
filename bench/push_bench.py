"""Benchmark of push notifications (SPEC §12): delivery latency, and what push costs the
follow-up.

Three processes: the 1.0 agent of ``continue_bench.py`` (answers at once), the gateway (the
real ``a2a-continue serve``), and this script, which is both the load generator and the
webhook receiver (an aiohttp app that answers 200 at once).
- Delivery latency: follow-ups at a steady rate (default 100 events/s) on tasks that each
  have a push config; for each delivery, from the moment its event was recorded (the
  outbox row's time, in PostgreSQL's clock) to the moment the receiver got it (this
  machine's clock, the same one): p50 and p99.
- Hot path: follow-up throughput at concurrency 16 on tasks with a push config each, next
  to tasks without (rounds interleaved, best of each): the ratio (target >= x0.90).
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
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from continue_bench import (  # noqa: E402  (the path above makes it importable)
    database,
    free_port,
    percentile,
    process,
    timed,
    wait_listening,
)

ROOT = Path(__file__).resolve().parent.parent
TASKS = 16
ROUNDS = 2


class Receiver:
    """The webhook: when each delivery id arrived (wall clock)."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}

    async def hook(self, request: web.Request) -> web.Response:
        await request.read()
        self.arrived.setdefault(request.headers["A2A-Delivery-Id"], time.time())
        return web.Response(status=200)


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
    receiver: Receiver,
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
            if len(rows) >= total and all(r["id"] in receiver.arrived for r in rows):
                break
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
    waits = sorted(max(0.0, receiver.arrived[r["id"]] - float(r["at"])) for r in rows)
    return percentile(waits, 0.50), percentile(waits, 0.99), len(waits)


async def throughput(
    http: aiohttp.ClientSession, follow: list[str], auth: dict[str, str], n: int
) -> float:
    """Follow-ups per second at concurrency 16 (one task per worker)."""

    async def call(worker: int) -> None:
        async with http.post(follow[worker], data=b'{"text":"x"}', headers=auth) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"follow-up: {r.status}")

    await timed(min(n // 4, 200), TASKS, call)
    began = time.perf_counter()
    await timed(n, TASKS, call)
    return n / (time.perf_counter() - began)


async def measure(args: argparse.Namespace, urls: dict[str, str], token: str, db: str) -> None:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(urls["hook"].rsplit(":", 1)[1])).start()
    hook = urls["hook"] + "/hook"
    auth = {"Authorization": f"Bearer {token}"}
    base = urls["gateway"]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as http:
        reg = {"name": "bench", "endpointUrl": urls["agent"] + "/", "protocolVersion": "1.0"}
        agent = (await _post(http, base + "/v1/a2a/agents", reg, auth))["id"]

        def follow(tasks: list[str]) -> list[str]:
            return [f"{base}/v1/a2a/{agent}/tasks/{t}/messages" for t in tasks]

        pushed = follow(await _tasks(http, base, agent, auth, hook))
        plain = follow(await _tasks(http, base, agent, auth, None))
        p50 = p99 = count = 0
        if not args.no_latency:
            p50, p99, count = await latency(
                http, pushed, auth, receiver, args.rate, args.seconds, db
            )
        without, with_push = [], []
        for _ in range(ROUNDS):
            without.append(await throughput(http, plain, auth, args.requests))
            with_push.append(await throughput(http, pushed, auth, args.requests))
    await runner.cleanup()
    best_without, best_with = max(without), max(with_push)
    print(
        f"push: delivery latency p50 {p50:.1f} ms, p99 {p99:.1f} ms at {args.rate:g} events/s"
        f" ({count} deliveries); follow-up c=16 with a push config on every task"
        f" {best_with:.0f} req/s vs {best_without:.0f} without"
        f" (x{best_with / best_without:.2f}, target >= x0.90)"
    )


def main() -> None:
    """Start the agent and the gateway; measure; print the line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=100.0, help="events per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--requests", type=int, default=2000, help="per throughput round")
    parser.add_argument("--quick", action="store_true", help="3 s of events, 300 requests")
    # Experiments: measure the hot path alone (e.g. with A2AC_PUSH_DISPATCH=false).
    parser.add_argument("--no-latency", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.requests = 3.0, 300

    from a2a_continue.core.callers import mint_token
    from a2a_continue.runtime.db import migrate_url
    from a2a_continue.runtime.secrets import new_key

    ports = {name: free_port() for name in ("agent", "gateway", "hook")}
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    secret = new_key() + new_key()
    with ExitStack() as stack:
        url = stack.enter_context(database())
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
        gateway = stack.enter_context(
            process([sys.executable, "-m", "a2a_continue", "serve"], env, logs / "gateway")
        )
        token = mint_token(secret, "bench@example.com", ["*"])
        import uvloop

        async def run() -> None:
            async with aiohttp.ClientSession() as http:
                await wait_listening(urls["gateway"] + "/healthz", http, gateway)
                await wait_listening(urls["agent"] + "/", http, agent)
            await measure(args, urls, token, url)

        uvloop.run(run())


if __name__ == "__main__":
    main()
