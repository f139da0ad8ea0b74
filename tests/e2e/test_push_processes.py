"""Two `serve` processes on one database deliver every push exactly once by id, one of them
killed mid-run (SPEC §12: at-least-once, leases, SKIP LOCKED)."""

from __future__ import annotations

import asyncio
import collections
import itertools
import signal
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from a2a_continue.core.push.owed import DELIVERY_ID_SQL, parts_sql
from tests.support.client import Client, register
from tests.support.fakes import FakeAgent, rpc_result, task_v10
from tests.support.processes import GatewayProcess
from tests.support.push import add_config, start_task
from tests.support.servers import serve_aiohttp
from tests.support.waiting import eventually

JSON = dict[str, Any]

# The deliveries leased and not yet answered, by lease: each leased config's next delivery
# from its log, and leased pending rows ($1: lease seconds left at least; $2: ids received).
HELD = f"""SELECT * FROM (
    SELECT {DELIVERY_ID_SQL.format(config="c.row_id", seq="n.seq", part="n.part")} AS id,
        c.lease_token
    FROM a2a_push_configs c CROSS JOIN LATERAL (
        SELECT * FROM ({parts_sql("c")}) p ORDER BY seq, part LIMIT 1) n
    WHERE c.lease_token IS NOT NULL AND c.lease_expires_at > now() + make_interval(secs => $1)
    UNION ALL
    SELECT id, lease_token FROM a2a_push_deliveries
    WHERE state = 'pending' AND lease_token IS NOT NULL
      AND lease_expires_at > now() + make_interval(secs => $1)
) held WHERE id <> ALL ($2::uuid[])"""
TASKS = 50
FOLLOW_UPS = 10  # per task: 500 events, 500 deliveries (0.3 configs: one per event)
KILL_AFTER = 100  # deliveries received before the receiver holds its answers
LEASE_S = 12
FRESH_S = 8  # lease left on the held rows of each process when one is killed: room to look


async def test_two_processes_deliver_every_event_once_by_id_with_one_killed(
    spawn_gateway: Callable[..., Awaitable[GatewayProcess]],
    fake_agent: Callable[[Any], Awaitable[FakeAgent]],
    session: aiohttp.ClientSession,
    db: asyncpg.Connection,
) -> None:
    received: list[str] = []
    enough = asyncio.Event()
    # Past KILL_AFTER the receiver holds its answers until one process is killed, so that
    # both have deliveries in flight (leased) when it dies.
    gate = asyncio.Event()
    gate.set()

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        await gate.wait()
        received.append(request.headers["A2A-Delivery-Id"])
        if len(received) >= KILL_AFTER and not enough.is_set():
            enough.set()
            gate.clear()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    starts = itertools.count()

    async def agent(request: JSON) -> Any:
        message = request["params"]["message"]
        task_id = message.get("taskId") or f"T{next(starts)}"
        return rpc_result(request, task_v10(task_id, "input-required", text=message["messageId"]))

    env = {
        "A2AC_PUSH_LEASE_S": str(LEASE_S),
        "A2AC_PUSH_POLL_S": "0.5",
        "A2AC_PUSH_RETRY_BASE_S": "0.1",
    }
    async with serve_aiohttp(app) as receiver_base:
        a, b = await asyncio.gather(spawn_gateway(**env), spawn_gateway(**env))
        client = Client(b.url, session)
        fake = await fake_agent(agent)
        agent_id = await register(client, fake.url)
        tasks = [await start_task(client, agent_id) for _ in range(TASKS)]
        for task in tasks:
            await add_config(client, agent_id, task, url=receiver_base + "/hook", version="0.3")

        calls = asyncio.Semaphore(10)  # within the agent's call limit

        async def turns(task: str) -> None:
            for i in range(FOLLOW_UPS):
                path = f"/v1/a2a/{agent_id}/tasks/{task}/messages"
                async with calls:
                    r = await client.call("POST", path, {"text": f"turn {i}"})
                assert r.status == 200, r.raw

        producing = asyncio.gather(*(turns(t) for t in tasks))
        await asyncio.wait_for(enough.wait(), 120)

        async def held_by_both(left_s: float = 0) -> dict[Any, list[Any]] | None:
            """The rows each process has leased and the receiver has not answered (held at
            the gate or not yet sent), by lease token, when two tokens hold some with
            ``left_s`` seconds of lease still to run (a row the receiver took may be settled
            by its sender at any moment, killed or not)."""
            rows = await db.fetch(HELD, left_s, received)
            by: dict[Any, list[Any]] = {}
            for row in rows:
                by.setdefault(row["lease_token"], []).append(row["id"])
            return by if len(by) == 2 else None

        # Each process leases with its own token: wait until both hold deliveries whose lease
        # has FRESH_S seconds to run, so that none of the killed process's passes to the
        # survivor (or times out and goes back to the queue) before the look below.
        await eventually(lambda: held_by_both(FRESH_S), "both processes holding deliveries", 60)
        a.process.send_signal(signal.SIGKILL)
        await a.process.wait()
        # What each process held once one was dead: the killed process's rows it can no
        # longer settle, the survivor's it will once the gate opens.
        leased = await held_by_both()
        gate.set()
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
    # The killed process's leased rows were attempted again (by the other, once the lease ran
    # out: it is the only one left) and delivered. (The survivor's own held rows may have
    # been attempted again too, had the hold outlasted their lease: at-least-once.)
    attempts = {r["id"]: r["attempts"] for r in await db.fetch(
        "SELECT id, attempts FROM a2a_push_deliveries")}  # fmt: skip
    assert leased is not None, "the two processes' held rows, once one was dead"
    retaken = [ids for ids in leased.values() if all(attempts[i] >= 2 for i in ids)]
    assert retaken, leased
    # At-least-once: a delivery reaches the receiver more than once only when it was
    # attempted more than once (a sender killed, or a held answer outlasting its timeout).
    times = collections.Counter(received)
    assert all(attempts[uuid.UUID(i)] >= n for i, n in times.items())
