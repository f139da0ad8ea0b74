"""Fair shares at the REST edge (SPEC §20): token buckets and in-flight caps per caller and
team, the 429s and their headers, the admins' overrides on every replica, what is not
counted."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.client import Client, assert_problem, register, token
from tests.support.fakes import JSON, StartFake, rpc_result, task_v10
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually

ADMIN = token("root@example.com", admin=True)
ALICE_BLUE = token("alice@example.com", teams=["blue"])
BOB_BLUE = token("bob@example.com", teams=["blue"])
CAROL = token("carol@example.com")


@contextlib.asynccontextmanager
async def gateway(settings: Settings, **limits: Any) -> AsyncIterator[Client]:
    """A gateway with these limits, and a client of it calling as alice."""
    changed = msgspec.structs.replace(settings, **limits)
    async with serve_asgi(create_app(changed)) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


async def new_task(request: JSON) -> JSON:
    return rpc_result(request, task_v10(uuid.uuid4().hex, "input-required"))


def retry_after(r: Any) -> int:
    return int(r.headers["Retry-After"])


async def test_a_burst_is_admitted_then_429_rate_limited_with_the_ratelimit_headers(
    settings: Settings, db: asyncpg.Connection
) -> None:
    async with gateway(settings, limit_caller_rps=0.5, limit_caller_burst=5) as client:
        for _ in range(5):
            assert (await client.call("GET", "/v1/a2a/agents")).status == 200
        r = await client.call("GET", "/v1/a2a/agents")
        problem = assert_problem(r, 429)
        assert problem["type"] == "urn:a2a-continue:problem:rate-limited"
        assert problem["limit"] == "caller"
        assert 1 <= retry_after(r) <= 2
        assert r.headers["RateLimit-Policy"] == '"caller";q=5;w=10'
        assert re.fullmatch(r'"caller";r=0;t=\d+', r.headers["RateLimit"])
        assert r.headers["RateLimit"] == f'"caller";r=0;t={retry_after(r)}'


async def test_tokens_come_back_at_the_rate(settings: Settings, db: asyncpg.Connection) -> None:
    async with gateway(settings, limit_caller_rps=3.0, limit_caller_burst=2) as client:
        statuses = [(await client.call("GET", "/v1/a2a/agents")).status for _ in range(3)]
        assert statuses == [200, 200, 429]

        async def admitted() -> bool:
            return (await client.call("GET", "/v1/a2a/agents")).status == 200

        await eventually(admitted, "a token came back", within_s=3)


async def test_calls_in_flight_past_the_cap_are_429_too_many_in_flight(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    release = asyncio.Event()

    async def held(request: JSON) -> JSON:
        await release.wait()
        return await new_task(request)

    agent = await fake_agent(held)
    async with gateway(settings, limit_caller_inflight=1) as client:
        agent_id = await register(client, agent.url)
        before = len(agent.received)
        first = asyncio.ensure_future(
            client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"})
        )
        await eventually(lambda: len(agent.received) > before, "the first call reached the agent")
        r = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "again"})
        problem = assert_problem(r, 429)
        assert problem["type"] == "urn:a2a-continue:problem:too-many-in-flight"
        assert retry_after(r) >= 1
        # Reads count against the rate only.
        assert (await client.call("GET", f"/v1/a2a/{agent_id}/tasks")).status == 200
        release.set()
        assert (await first).status == 200
        r = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "now"})
        assert r.status == 200, r.raw


async def test_a_team_limit_counts_every_members_requests_for_the_team(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await fake_agent(new_task)
    async with gateway(settings, limit_team_rps=0.01, limit_team_burst=3) as client:
        alice, bob = client.as_(ALICE_BLUE), client.as_(BOB_BLUE)
        agent_id = await register(alice, agent.url, visibility="team", teamId="blue")
        start = f"/v1/a2a/{agent_id}/messages"
        for who in (alice, bob, alice):
            r = await who.call("POST", start, {"text": "hi", "teamId": "blue"})
            assert r.status == 200, r.raw
        r = await bob.call("POST", start, {"text": "hi", "teamId": "blue"})
        assert assert_problem(r, 429)["limit"] == "team"
        assert r.headers["RateLimit-Policy"].startswith('"team";q=3;')
        # A task of the team counts for it too; a start for no team counts for the caller only.
        task_id = await db.fetchval("SELECT task_id FROM a2a_tasks LIMIT 1")
        r = await alice.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}")
        assert assert_problem(r, 429)["limit"] == "team"
        r = await bob.call("POST", start, {"text": "hi"})
        assert r.status == 200, r.raw


async def test_an_override_applies_on_a_second_replica_within_5_s(
    settings: Settings, db: asyncpg.Connection
) -> None:
    async with gateway(settings) as one, gateway(settings) as two:
        admin, carol = one.as_(ADMIN), two.as_(CAROL)
        assert (await carol.call("GET", "/v1/a2a/agents")).status == 200  # no limit yet
        path = "/v1/a2a/limits/caller/carol@example.com"
        r = await admin.call("PUT", path, {"rps": 0.01, "burst": 2})
        assert r.status == 200, r.raw
        stored = r.json()
        assert stored["rps"] == 0.01 and stored["burst"] == 2 and "inflight" not in stored
        assert stored["effective"] == {"rps": 0.01, "burst": 2, "inflight": None}

        async def refused() -> bool:
            return (await carol.call("GET", "/v1/a2a/agents")).status == 429

        await eventually(refused, "the second replica applied the override", within_s=5)
        r = await two.as_(ADMIN).call("GET", path)
        assert r.status == 200 and r.json()["burst"] == 2
        assert (await admin.call("DELETE", path)).status == 204
        assert (await admin.call("DELETE", path)).status == 204
        assert_problem(await admin.call("GET", path), 404)

        async def admitted() -> bool:
            return (await carol.call("GET", "/v1/a2a/agents")).status == 200

        await eventually(admitted, "the second replica dropped the override", within_s=5)


async def test_only_admins_change_limits_and_a_bad_body_is_refused(
    client: Client, db: asyncpg.Connection
) -> None:
    path = "/v1/a2a/limits/team/blue"
    assert_problem(await client.call("PUT", path, {"rps": 1}), 403)
    assert_problem(await client.call("GET", path), 403)
    assert_problem(await client.call("DELETE", path), 403)
    admin = client.as_(ADMIN)
    assert_problem(await admin.call("PUT", path, {"rps": -1}), 422)
    assert_problem(await admin.call("PUT", path, {"rps": 1, "speed": 2}), 422)
    assert_problem(await admin.call("PUT", path, {"burst": 1.5}), 422)
    r = await admin.call("PUT", path, {"rps": None, "inflight": 3})
    assert r.status == 200, r.raw
    assert r.json()["rps"] is None and r.json()["effective"]["inflight"] == 3
    assert_problem(await admin.call("PUT", "/v1/a2a/limits/agent/x", {}), 404)


async def test_a_caller_under_its_limit_is_never_refused_beside_a_flood(
    settings: Settings, db: asyncpg.Connection
) -> None:
    async with gateway(settings, limit_caller_rps=100.0, limit_caller_burst=10) as client:
        flooder = client.as_(CAROL)
        stop = asyncio.Event()

        async def flood() -> list[int]:
            statuses = []
            while not stop.is_set():
                statuses.append((await flooder.call("GET", "/v1/a2a/agents")).status)
            return statuses

        floods = [asyncio.ensure_future(flood()) for _ in range(8)]
        mine = []
        for _ in range(30):  # about 40 a second: within 100/s
            mine.append((await client.call("GET", "/v1/a2a/agents")).status)
            await asyncio.sleep(0.025)
        stop.set()
        flooded = [s for f in floods for s in await f]
        assert set(mine) == {200}
        assert 429 in flooded


async def test_health_metrics_cards_jwks_and_the_console_are_not_counted(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await fake_agent(new_task)
    async with gateway(settings) as plain:
        agent_id = await register(plain, agent.url, visibility="public")
    async with gateway(settings, limit_caller_rps=0.01, limit_caller_burst=1) as client:
        card = f"/a2a/{agent_id}/.well-known/agent-card.json"
        for path in ("/healthz", "/readyz", "/metrics", "/.well-known/jwks.json", "/console", card):
            for _ in range(3):
                r = await client.call("GET", path)
                assert r.status == 200, (path, r.raw)
        assert (await client.call("GET", "/v1/a2a/agents")).status == 200
        assert_problem(await client.call("GET", "/v1/a2a/agents"), 429)
        r = await client.call("GET", "/metrics")
        assert 'a2ac_rate_limited_total{kind="rate-limited"}' in r.raw.decode()


async def test_a_name_longer_than_the_store_keeps_is_refused_with_422_and_nothing_stored(
    client: Client, db: asyncpg.Connection
) -> None:
    admin = client.as_(ADMIN)
    path = "/v1/a2a/limits/caller/" + "x" * 501
    r = await admin.call("PUT", path, {"rps": 5})
    assert_problem(r, 422)
    assert r.json()["errors"][0]["loc"] == "$.path.name"
    assert await db.fetchval("SELECT count(*) FROM a2a_limit_overrides") == 0
