"""The façade under the limits (SPEC §20): HTTP 429 with the problem body on both bindings,
before any JSON-RPC or HTTP+JSON processing, as for a 401."""

from __future__ import annotations

import aiohttp
import asyncpg
import msgspec

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.client import Client, assert_problem, register
from tests.support.fakes import JSON, StartFake, rpc_result, task_v10
from tests.support.servers import serve_asgi

RPC = {"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "nope"}}


async def answer(request: JSON) -> JSON:
    return rpc_result(request, task_v10("T1", "working"))


async def test_the_facade_answers_http_429_with_the_problem_on_both_bindings(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await fake_agent(answer)
    async with serve_asgi(create_app(settings)) as base, aiohttp.ClientSession() as session:
        agent_id = await register(Client(base, session), agent.url)
    limited = msgspec.structs.replace(settings, limit_caller_rps=0.01, limit_caller_burst=2)
    async with serve_asgi(create_app(limited)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        r = await client.call("POST", f"/a2a/{agent_id}", RPC, headers={"A2A-Version": "1.0"})
        assert r.status == 200 and r.json()["id"] == 7
        assert (await client.call("GET", f"/a2a/{agent_id}/tasks/nope")).status == 404
        for binding in (
            client.call("POST", f"/a2a/{agent_id}", RPC, headers={"A2A-Version": "1.0"}),
            client.call("POST", f"/a2a/{agent_id}", data=b"{not json"),
            client.call("GET", f"/a2a/{agent_id}/tasks/nope"),
            client.call("POST", f"/a2a/{agent_id}/v1/message:send", {"message": {}}),
        ):
            r = await binding
            problem = assert_problem(r, 429)
            assert problem["type"] == "urn:a2a-continue:problem:rate-limited"
            assert "jsonrpc" not in problem
            assert int(r.headers["Retry-After"]) >= 1
            assert r.headers["RateLimit-Policy"].startswith('"caller";q=2;')
