"""Benchmark: what a follow-up through the gateway costs, as ratios to two baselines.

Baselines, measured in the same run against the same local agent:
- direct: the client posts the A2A request to the agent itself;
- proxy: a bare Starlette + aiohttp pass-through (no auth, no validation, no database),
  the least any HTTP gateway on this stack can cost.
Ratios hold on a noisy machine where absolute milliseconds do not. Usage:
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
from typing import Any

import aiohttp
from aiohttp import web
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from a2a_continue.app import create_app
from a2a_continue.auth import mint_token
from a2a_continue.db import migrate_url
from a2a_continue.secrets import new_key
from a2a_continue.serving import serve_in_loop
from a2a_continue.settings import Settings, load_settings

Call = Callable[[int], Awaitable[None]]


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


def proxy_app(agent_url: str, session: aiohttp.ClientSession) -> Starlette:
    """A pass-through: the request body goes to the agent, its answer comes back."""

    async def forward(request: Request) -> Response:
        async with session.post(agent_url, data=await request.body()) as r:
            return Response(await r.read(), media_type="application/json")

    return Starlette(routes=[Route("/", forward, methods=["POST"])])


def send_request(task_id: str) -> dict[str, Any]:
    """The 1.0 follow-up a client would send the agent itself."""
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "taskId": task_id,
        "parts": [{"text": "x"}],
    }
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "SendMessage",
            "params": {"message": message}}  # fmt: skip


async def timed(n: int, concurrency: int, call: Call) -> list[float]:
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
    """Measure the three paths sequentially and concurrently, then print the ratios."""
    runner = web.AppRunner(agent_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    agent_url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    statements: list[str] = []
    gateway = create_app(settings, on_query=lambda record: statements.append(record.query))
    token = mint_token(settings.jwt_secret, "bench@example.com", ["*"])
    try:
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
            aiohttp.ClientSession() as upstream,
            serve_in_loop(gateway) as base,
            serve_in_loop(proxy_app(agent_url, upstream)) as proxy,
        ):
            reg = {"name": "bench", "endpointUrl": agent_url, "protocolVersion": "1.0"}
            async with http.post(base + "/v1/a2a/agents", json=reg) as r:
                agent_id = (await r.json())["id"]
            tasks: list[str] = []
            for _ in range(concurrency):
                start_url = f"{base}/v1/a2a/{agent_id}/messages"
                async with http.post(start_url, json={"text": "hi"}) as r:
                    tasks.append((await r.json())["result"]["task"]["id"])

            def post_to(url: str) -> Call:
                async def call(worker: int) -> None:
                    async with http.post(url, json=send_request(tasks[worker])) as r:
                        await r.read()

                return call

            async def follow_up(worker: int) -> None:
                url = f"{base}/v1/a2a/{agent_id}/tasks/{tasks[worker]}/messages"
                async with http.post(url, json={"text": "x"}) as r:
                    assert r.status == 200, await r.text()
                    await r.read()

            paths = {"direct": post_to(agent_url), "proxy": post_to(proxy), "gateway": follow_up}
            for call in paths.values():
                await timed(50, concurrency, call)  # warm every path
            rows: dict[tuple[str, int], dict[str, float]] = {}
            for c in (1, concurrency):
                for name, call in paths.items():
                    statements.clear()
                    start = time.perf_counter()
                    latencies = await timed(n, c, call)
                    rows[name, c] = summary(latencies, time.perf_counter() - start)
                    if name == "gateway":
                        rows[name, c]["statements_per_request"] = len(statements) / n
    finally:
        await runner.cleanup()
    report(rows, concurrency)


def report(rows: dict[tuple[str, int], dict[str, float]], concurrency: int) -> None:
    """Print each measurement and the gateway's ratios to the baselines."""
    for (name, c), row in rows.items():
        label = f"{name}, {'sequential' if c == 1 else f'{c} at once'}"
        print(f"{label:24s} " + "  ".join(f"{k}={v:.2f}" for k, v in row.items()))
    print()
    for base in ("direct", "proxy"):
        latency = rows["gateway", 1]["p50_ms"] / rows[base, 1]["p50_ms"]
        rps = rows["gateway", concurrency]["rps"] / rows[base, concurrency]["rps"]
        print(
            f"gateway/{base}: p50 latency x{latency:.2f} (sequential), "
            f"throughput x{rps:.2f} ({concurrency} at once)"
        )


def main() -> None:
    """Parse the arguments, get a database, run the measurement."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    with ExitStack() as stack:
        url = load_settings().database_url
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
