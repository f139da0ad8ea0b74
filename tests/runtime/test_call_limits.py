"""Outbound isolation: calls per registered agent are bounded; past the bound, 503 at once."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import asyncpg
import msgspec
from aiohttp import web

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.client import Client, register
from tests.support.fakes import JSON, StartFake, rpc_result, task_v10
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually


class Gate:
    """Holds every start whose text is 'hold' until released; answers the rest at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = 0

    async def __call__(self, request: JSON) -> Any:
        if request["params"]["message"]["parts"][0]["text"] == "hold":
            self.held += 1
            await self.release.wait()
        return rpc_result(request, task_v10(f"T-{request['id']}", "completed"))


async def test_calls_past_an_agents_limit_are_503_at_once_while_other_agents_answer(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    gate = Gate()
    fake = await fake_agent(gate)
    limited = msgspec.structs.replace(settings, agent_concurrency=2, agent_timeout_s=30)
    async with serve_asgi(create_app(limited)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        # Two registrations of one endpoint: the limit is per agent, not per host:port.
        hung = await register(client, fake.url)
        other = await register(client, fake.url)
        held = [
            asyncio.create_task(client.call("POST", f"/v1/a2a/{hung}/messages", {"text": "hold"}))
            for _ in range(2)
        ]
        await eventually(lambda: gate.held == 2, "both calls held by the agent")

        busy = await asyncio.wait_for(
            client.call("POST", f"/v1/a2a/{hung}/messages", {"text": "hi"}), 10
        )
        fine = await asyncio.wait_for(
            client.call("POST", f"/v1/a2a/{other}/messages", {"text": "hi"}), 10
        )
        gate.release.set()
        answered = await asyncio.gather(*held)
        after = await client.call("POST", f"/v1/a2a/{hung}/messages", {"text": "hi"})

    assert busy.status == 503, busy.raw
    assert busy.headers["Content-Type"].startswith("application/problem+json")
    assert busy.json()["type"].endswith(":agent-busy")
    assert busy.headers["Retry-After"] == "1"
    assert fine.status == 200, fine.raw
    assert [r.status for r in answered] == [200, 200]
    assert after.status == 200, after.raw
    assert gate.held == 2
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 4


async def test_a_hundred_hung_calls_to_one_agent_do_not_queue_another_agent_on_its_host(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    gate = Gate()
    fake = await fake_agent(gate)
    roomy = msgspec.structs.replace(settings, agent_concurrency=150, agent_timeout_s=30)
    async with (
        serve_asgi(create_app(roomy)) as base,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        client = Client(base, session)
        hung = await register(client, fake.url)
        other = await register(client, fake.url)
        held = [
            asyncio.create_task(client.call("POST", f"/v1/a2a/{hung}/messages", {"text": "hold"}))
            for _ in range(120)
        ]
        await eventually(lambda: gate.held == 120, "every call held by the agent")
        assert gate.held == 120

        fine = await asyncio.wait_for(
            client.call("POST", f"/v1/a2a/{other}/messages", {"text": "hi"}), 10
        )
        gate.release.set()
        answered = await asyncio.gather(*held)

    assert fine.status == 200, fine.raw
    assert {r.status for r in answered} == {200}


async def test_a_cookie_an_agent_sets_is_not_sent_on_later_calls(
    client: Client, fake_agent: StartFake
) -> None:
    async def set_cookie(request: JSON) -> Any:
        answer = web.json_response(rpc_result(request, task_v10(f"T-{request['id']}", "completed")))
        answer.set_cookie("session", "caller-a-secret")
        return answer

    fake = await fake_agent(set_cookie)
    # By name: aiohttp's default jar keeps no cookies of hosts given as addresses.
    agent = await register(client, fake.url.replace("127.0.0.1", "localhost"))
    for _ in range(2):
        r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
        assert r.status == 200, r.raw
    assert len(fake.headers) == 2
    assert "Cookie" not in fake.headers[1]
