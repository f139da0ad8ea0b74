"""Two `serve` processes on one database deliver every push exactly once by id, one of them
killed mid-run (SPEC §12: at-least-once, leases, SKIP LOCKED)."""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from tests.support.client import Client, register
from tests.support.fakes import FakeAgent, rpc_result, task_v10
from tests.support.processes import GatewayProcess
from tests.support.push import add_config, start_task
from tests.support.servers import serve_aiohttp
from tests.support.waiting import eventually

JSON = dict[str, Any]
TASKS = 10
FOLLOW_UPS = 50  # per task: 500 events, 500 deliveries (0.3 configs: one per event)
KILL_AFTER = 120  # deliveries received before one process is killed


async def test_two_processes_deliver_every_event_once_by_id_with_one_killed(
    spawn_gateway: Callable[..., Awaitable[GatewayProcess]],
    fake_agent: Callable[[Any], Awaitable[FakeAgent]],
    session: aiohttp.ClientSession,
    db: asyncpg.Connection,
) -> None:
    received: list[str] = []
    enough = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        # A receiver that takes a moment, so that deliveries are in flight when one dies.
        await asyncio.sleep(0.02)
        received.append(request.headers["A2A-Delivery-Id"])
        if len(received) >= KILL_AFTER:
            enough.set()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    starts = itertools.count()

    async def agent(request: JSON) -> Any:
        message = request["params"]["message"]
        task_id = message.get("taskId") or f"T{next(starts)}"
        return rpc_result(request, task_v10(task_id, "input-required", text=message["messageId"]))

    env = {"A2AC_PUSH_LEASE_S": "2", "A2AC_PUSH_POLL_S": "0.5", "A2AC_PUSH_RETRY_BASE_S": "0.1"}
    async with serve_aiohttp(app) as receiver_base:
        a, b = await asyncio.gather(spawn_gateway(**env), spawn_gateway(**env))
        client = Client(b.url, session)
        fake = await fake_agent(agent)
        agent_id = await register(client, fake.url)
        tasks = [await start_task(client, agent_id) for _ in range(TASKS)]
        for task in tasks:
            await add_config(client, agent_id, task, url=receiver_base + "/hook", version="0.3")

        async def turns(task: str) -> None:
            for i in range(FOLLOW_UPS):
                path = f"/v1/a2a/{agent_id}/tasks/{task}/messages"
                r = await client.call("POST", path, {"text": f"turn {i}"})
                assert r.status == 200, r.raw

        producing = asyncio.gather(*(turns(t) for t in tasks))
        await asyncio.wait_for(enough.wait(), 120)
        a.process.send_signal(signal.SIGKILL)
        await a.process.wait()
        await producing

        async def all_delivered() -> bool:
            counts = await db.fetchrow(
                "SELECT count(*) AS n, count(*) FILTER (WHERE state = 'delivered') AS done"
                " FROM a2a_push_deliveries"
            )
            return bool(counts["n"] == TASKS * FOLLOW_UPS == counts["done"])

        await eventually(all_delivered, "every delivery delivered", within_s=120)
    stored = {str(r["id"]) for r in await db.fetch("SELECT id FROM a2a_push_deliveries")}
    per_change = await db.fetchval("SELECT count(DISTINCT (config, seq)) FROM a2a_push_deliveries")
    assert per_change == len(stored) == TASKS * FOLLOW_UPS  # one delivery per change
    assert set(received) == stored  # 0 missing, nothing unknown
    # The receiver never failed, so a second attempt is a row the killed process had leased,
    # sent by the other once the lease ran out.
    retaken = await db.fetchval("SELECT count(*) FROM a2a_push_deliveries WHERE attempts > 1")
    assert retaken > 0
    # At-least-once: only those may have reached the receiver twice (same id, deduped there).
    assert len(received) - len(set(received)) <= retaken
