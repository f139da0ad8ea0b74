"""One watcher per live task across gateway processes on one database (SPEC §8.4)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web

from tests.support.agents import events, register
from tests.support.client import Client
from tests.support.processes import GatewayProcess
from tests.support.servers import serve_aiohttp
from tests.support.waiting import eventually

JSON = dict[str, Any]
LEASE_S = 1.0
WATCH_ENV = {
    "A2AC_WATCH_LEASE_S": str(LEASE_S),
    "A2AC_WATCH_RENEW_S": "0.25",
    "A2AC_WATCH_PICKUP_S": "0.2",
    "A2AC_WATCH_POLL_BASE_S": "0.05",
    "A2AC_WATCH_POLL_MAX_S": "0.2",
}


@pytest.fixture
def spawn(
    spawn_gateway: Callable[..., Awaitable[GatewayProcess]],
) -> Callable[..., Awaitable[GatewayProcess]]:
    """Start gateway processes with a quick watcher (and the given overrides)."""
    return lambda **overrides: spawn_gateway(**{**WATCH_ENV, **overrides})


@dataclass
class Subscription:
    task_id: str
    broken: bool = False
    done: bool = False


@dataclass
class StreamingAgent:
    """A 1.0 agent whose tasks work until released; it holds every subscription open, writing
    a keep-alive comment now and then so that it notices a subscriber that went away."""

    url: str = ""
    received: list[JSON] = field(default_factory=list)
    subscriptions: list[Subscription] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def of(self, task_id: str) -> list[Subscription]:
        return [s for s in self.subscriptions if s.task_id == task_id]

    async def endpoint(self, request: web.Request) -> web.StreamResponse:
        body = msgspec.json.decode(await request.read())
        self.received.append(body)
        if body["method"] == "SendMessage":
            task = {"id": f"T-{uuid.uuid4().hex[:8]}", "contextId": "C", "status": WORKING}
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {"task": task}})
        if body["method"] == "GetTask":
            task = {"id": body["params"]["id"], "contextId": "C", "status": WORKING}
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": task})
        assert body["method"] == "SubscribeToTask"
        return await self.subscribe(request, body["id"], body["params"]["id"])

    async def subscribe(
        self, request: web.Request, rpc_id: str, task_id: str
    ) -> web.StreamResponse:
        held = Subscription(task_id)
        self.subscriptions.append(held)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def frame(result: JSON) -> None:
            data = msgspec.json.encode({"jsonrpc": "2.0", "id": rpc_id, "result": result})
            await response.write(b"data: " + data + b"\n\n")

        try:
            await frame({"task": {"id": task_id, "contextId": "C", "status": WORKING}})
            while not self.release.is_set():
                await response.write(b": keep-alive\n\n")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.release.wait(), 0.05)
            update = {"taskId": task_id, "contextId": "C", "status": ASKING}
            await frame({"statusUpdate": update})
            held.done = True
        except (ConnectionError, RuntimeError):
            held.broken = True
        return response


WORKING = {"state": "TASK_STATE_WORKING"}
ASKING = {
    "state": "TASK_STATE_INPUT_REQUIRED",
    "message": {"messageId": "ask", "role": "ROLE_AGENT", "parts": [{"text": "Which city?"}]},
}


@pytest.fixture
async def streaming_agent() -> AsyncIterator[StreamingAgent]:
    agent = StreamingAgent()
    app = web.Application()
    app.router.add_post("/", agent.endpoint)
    async with serve_aiohttp(app) as base:
        agent.url = base + "/"
        try:
            yield agent
        finally:
            agent.release.set()


async def test_each_live_task_has_one_watcher_and_a_killed_ones_tasks_are_taken_over(
    spawn: Callable[..., Awaitable[GatewayProcess]],
    session: aiohttp.ClientSession,
    db: asyncpg.Connection,
    streaming_agent: StreamingAgent,
) -> None:
    a, b = await asyncio.gather(spawn(), spawn())
    via_a, via_b = Client(a.url, session), Client(b.url, session)
    agent = await register(
        via_a,
        streaming_agent.url,
        "1.0",
        streaming_agent.received,
        capabilities={"streaming": True},
    )
    task_ids: list[str] = []
    for n in range(6):
        client = via_a if n % 2 else via_b
        r = await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
        assert r.status == 200, r.raw
        assert r.headers["A2A-Task-State"] == "working"
        task_ids.append(r.json()["result"]["task"]["id"])

    await eventually(
        lambda: all(streaming_agent.of(t) for t in task_ids), "a subscription to every task"
    )
    await asyncio.sleep(3 * LEASE_S)  # many pick-ups and renewals on both sides
    assert {t: len(streaming_agent.of(t)) for t in task_ids} == {t: 1 for t in task_ids}
    leased = await db.fetchval(
        "SELECT count(*) FROM a2a_tasks WHERE watch_expires_at > now() AND task_id = ANY($1)",
        task_ids,
    )
    assert leased == len(task_ids)

    a.process.kill()
    await a.process.wait()
    # A dead subscriber is noticed within a keep-alive (50 ms); a take-over needs the lease
    # to expire first (1 s): by the first take-over, every orphan is known.
    await eventually(
        lambda: any(len(streaming_agent.of(t)) == 2 for t in task_ids), "a first take-over"
    )
    orphans = {s.task_id for s in streaming_agent.subscriptions if s.broken}

    await eventually(
        lambda: all(len(streaming_agent.of(t)) == 2 for t in orphans), "the orphans taken over"
    )
    streaming_agent.release.set()

    async def all_asking() -> bool:
        for task_id in task_ids:
            r = await via_b.call("GET", agent.task(task_id))
            if r.json()["state"] != "input-required":
                return False
        return True

    await eventually(all_asking, "every task stored as input-required")
    for task_id in task_ids:
        expected = 2 if task_id in orphans else 1
        assert len(streaming_agent.of(task_id)) == expected
        logged = await events(via_b, agent, task_id)
        assert (logged[-1]["type"], logged[-1]["newState"]) == ("task_updated", "input-required")
        assert logged[-1]["data"] == {"source": "subscribe"}
    assert [r for r in streaming_agent.received if r["method"] == "GetTask"] == []
    assert 0 < len(orphans) < len(task_ids)


async def test_a_gateway_stopped_with_sigterm_gives_its_leases_back(
    spawn: Callable[..., Awaitable[GatewayProcess]],
    session: aiohttp.ClientSession,
    db: asyncpg.Connection,
    streaming_agent: StreamingAgent,
) -> None:
    # Leases far longer than the test: only their release lets the next process take over.
    long_leases = {"A2AC_WATCH_LEASE_S": "600", "A2AC_WATCH_RENEW_S": "300"}
    first = await spawn(**long_leases)
    client = Client(first.url, session)
    agent = await register(client, streaming_agent.url, "1.0", streaming_agent.received)
    r = await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
    task_id = r.json()["result"]["task"]["id"]
    await eventually(
        lambda: [q for q in streaming_agent.received if q["method"] == "GetTask"], "a poll"
    )

    first.process.terminate()
    assert await first.process.wait() == 0

    lease = await db.fetchrow(
        "SELECT watch_token, watch_started_at FROM a2a_tasks WHERE task_id = $1", task_id
    )
    assert lease is not None
    assert lease["watch_token"] is None and lease["watch_started_at"] is not None
    asked = len(streaming_agent.received)
    await spawn(**long_leases)
    await eventually(lambda: len(streaming_agent.received) > asked, "the next process polls")
    taken = await db.fetchval("SELECT watch_token FROM a2a_tasks WHERE task_id = $1", task_id)
    assert taken is not None
    assert "Traceback" not in first.log.read_text()
