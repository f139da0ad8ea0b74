"""Benchmark: the cost of a follow-up through the gateway, as a ratio to calling the agent.

Both paths run in the same process and the same run, against the same local agent, so the
ratio holds on a noisy machine where absolute milliseconds do not. Usage:
    python bench/continue_bench.py [--requests 300] [--concurrency 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path

import aiohttp
from aiohttp import web

from a2a_continue.app import create_app
from a2a_continue.auth import mint_token
from a2a_continue.db import migrate_url
from a2a_continue.secrets import new_key
from a2a_continue.serving import serve_in_loop
from a2a_continue.settings import Settings, load_settings


def agent_app() -> web.Application:
    """An agent that keeps every task in input-required, answering at once."""

    async def rpc(request: web.Request) -> web.Response:
        body = await request.json()
        message = body["params"]["message"]
        task = {
            "id": message.get("taskId") or str(uuid.uuid4()),
            "contextId": message.get("contextId") or str(uuid.uuid4()),
            "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
        }
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {"task": task}})

    app = web.Application()
    app.router.add_post("/", rpc)
    return app


async def timed(n: int, concurrency: int, call: Callable[[int], Awaitable[None]]) -> list[float]:
    """Run ``call`` n times, ``concurrency`` at once; return each latency in seconds.

    ``call`` gets its worker's number, so each worker keeps to its own task.
    """
    latencies: list[float] = []
    queue = iter(range(n))

    async def worker(number: int) -> None:
        for _ in queue:
            start = time.perf_counter()
            await call(number)
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return latencies


def summary(latencies: list[float], wall: float) -> dict[str, float]:
    """Median, p95 (ms) and throughput (requests/s)."""
    ordered = sorted(latencies)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[int(len(ordered) * 0.95) - 1] * 1000,
        "rps": len(ordered) / wall,
    }


async def measure(settings: Settings, n: int, concurrency: int) -> None:
    """Measure direct agent calls and gateway follow-ups, then print the ratios."""
    runner = web.AppRunner(agent_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    agent_url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    statements: list[str] = []
    app = create_app(settings, on_query=lambda record: statements.append(record.query))
    headers = {"Authorization": f"Bearer {mint_token(settings.jwt_secret, 'bench@x', ['*'])}"}
    try:
        async with serve_in_loop(app) as base, aiohttp.ClientSession(headers=headers) as http:
            reg = {"name": "bench", "endpointUrl": agent_url, "protocolVersion": "1.0"}
            async with http.post(base + "/v1/a2a/agents", json=reg) as r:
                agent_id = (await r.json())["id"]
            tasks: list[str] = []
            for _ in range(concurrency):
                async with http.post(
                    f"{base}/v1/a2a/{agent_id}/messages", json={"text": "hi"}
                ) as r:
                    tasks.append((await r.json())["result"]["task"]["id"])

            async def direct(i: int) -> None:
                payload = {
                    "jsonrpc": "2.0",
                    "id": str(i),
                    "method": "SendMessage",
                    "params": {
                        "message": {
                            "messageId": str(uuid.uuid4()),
                            "role": "ROLE_USER",
                            "taskId": tasks[i],
                            "parts": [{"text": "x"}],
                        }
                    },
                }
                async with http.post(agent_url, json=payload) as r:
                    await r.read()

            async def follow_up(i: int) -> None:
                url = f"{base}/v1/a2a/{agent_id}/tasks/{tasks[i]}/messages"
                async with http.post(url, json={"text": "x"}) as r:
                    assert r.status == 200, await r.text()
                    await r.read()

            await timed(50, concurrency, direct)  # warm both paths
            await timed(50, concurrency, follow_up)
            rows = {}
            for name, call, c in (
                ("direct, sequential", direct, 1),
                ("gateway, sequential", follow_up, 1),
                (f"direct, {concurrency} at once", direct, concurrency),
                (f"gateway, {concurrency} at once", follow_up, concurrency),
            ):
                statements.clear()
                start = time.perf_counter()
                latencies = await timed(n, c, call)
                rows[name] = summary(latencies, time.perf_counter() - start)
                if name.startswith("gateway"):
                    rows[name]["statements_per_request"] = len(statements) / n
    finally:
        await runner.cleanup()
    for name, row in rows.items():
        print(f"{name:28s} " + "  ".join(f"{k}={v:.2f}" for k, v in row.items()))
    seq = rows["gateway, sequential"]["p50_ms"] / rows["direct, sequential"]["p50_ms"]
    conc_name = f"{concurrency} at once"
    rps = rows[f"gateway, {conc_name}"]["rps"] / rows[f"direct, {conc_name}"]["rps"]
    print(
        f"\nratio gateway/direct: p50 latency x{seq:.2f} (sequential); "
        f"throughput x{rps:.2f} ({conc_name})"
    )


def main() -> None:
    """Parse the arguments, get a database, run the measurement."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    env = load_settings()
    with ExitStack() as stack:
        url = env.database_url
        if not url:
            from a2a_continue.embedded import embedded_database

            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="a2ac-bench-"))
            url = stack.enter_context(embedded_database(Path(tmp)))
        asyncio.run(migrate_url(url))
        settings = Settings(
            database_url=url, jwt_secret=new_key(), encryption_key=new_key(), pool_size=10
        )
        asyncio.run(measure(settings, args.requests, args.concurrency))


if __name__ == "__main__":
    main()
