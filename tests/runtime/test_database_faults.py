"""A database that freezes, stops or starts: bounded 503s, no 500, no claim left held."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.agents import Agent, register_fake, start
from tests.support.client import Client, Response
from tests.support.database import claim_of, direct_url
from tests.support.db_faults import FaultyDatabase, Mode, faulty_database
from tests.support.facade_clients import rpc
from tests.support.fakes import Flaky, StartFake
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually

# The database bound of these gateways; the rule is a 503 within it plus one second.
DB_TIMEOUT_S = 2.0
WITHIN_S = DB_TIMEOUT_S + 1.0


@dataclass
class Faulty:
    """A gateway whose database sits behind the fault proxy, and one of its agents."""

    proxy: FaultyDatabase
    client: Client
    agent: Agent
    flaky: Flaky


@pytest.fixture
async def faulty(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> AsyncIterator[Faulty]:
    """A gateway over the proxy (agent timeout long: a claim left held would outlive the test)
    with one agent and its task T1, waiting for a city."""
    # Straight to PostgreSQL even when the run goes through a pooler: the proxy plays the
    # server, so it stands where the server is (and PgBouncer 1.18 crashes on a client
    # whose server froze mid-statement, a bug of its own).
    assert settings.database_url
    async with faulty_database(direct_url(settings.database_url)) as proxy:
        changed = msgspec.structs.replace(
            settings,
            database_url=proxy.url,
            listen_database_url=None,
            db_timeout_s=DB_TIMEOUT_S,
            agent_timeout_s=60.0,
            pool_size=4,
        )
        async with serve_asgi(create_app(changed)) as base, aiohttp.ClientSession() as session:
            client = Client(base, session)
            flaky = Flaky()
            agent = await register_fake(client, fake_agent, flaky)
            await start(client, agent)
            try:
                yield Faulty(proxy, client, agent, flaky)
            finally:
                proxy.set("up")
                flaky.release.set()


async def timed(call: Awaitable[Response]) -> tuple[Response, float]:
    began = time.monotonic()
    r = await call
    return r, time.monotonic() - began


def assert_unavailable(r: Response, elapsed: float, what: str) -> None:
    assert r.status == 503, (what, r.status, r.raw)
    assert int(r.headers["Retry-After"]) > 0, what
    assert r.json()["type"] == "urn:a2a-continue:problem:database-unavailable", what
    assert elapsed < WITHIN_S + 0.5, (what, elapsed)


def database_routes(f: Faulty) -> dict[str, Callable[[], Awaitable[Response]]]:
    """One request per route that reads or writes the database."""
    c, a = f.client, f.agent
    return {
        "readyz": lambda: c.call("GET", "/readyz"),
        "agents": lambda: c.call("GET", "/v1/a2a/agents"),
        "agent": lambda: c.call("GET", f"/v1/a2a/agents/{a.id}"),
        "start": lambda: c.call("POST", f"/v1/a2a/{a.id}/messages", {"text": "weather?"}),
        "tasks": lambda: c.call("GET", f"/v1/a2a/{a.id}/tasks"),
        "task": lambda: c.call("GET", a.task("T1")),
        "events": lambda: c.call("GET", a.task("T1") + "/events"),
        "follow-up": lambda: c.call("POST", a.messages("T1"), {"text": "Paris"}),
        "cancel": lambda: c.call("POST", a.task("T1") + "/cancel"),
        "card": lambda: c.call("GET", f"/a2a/{a.id}/.well-known/agent-card.json"),
    }


async def test_every_request_answers_503_within_the_bound_while_the_database_is_frozen(
    faulty: Faulty,
) -> None:
    # Warm connections wait on a statement, the rest on the connect; more callers than
    # connections wait for one.
    await asyncio.gather(*(faulty.client.call("GET", "/readyz") for _ in range(4)))
    routes = database_routes(faulty)
    faulty.proxy.set("frozen")

    answers = await asyncio.gather(*(timed(call()) for call in routes.values()))

    for what, (r, elapsed) in zip(routes, answers, strict=True):
        assert_unavailable(r, elapsed, what)
    r, elapsed = await timed(faulty.client.call("GET", "/readyz"))
    assert_unavailable(r, elapsed, "readyz again")
    faulty.proxy.set("up")
    r = await faulty.client.call("GET", "/readyz")
    assert r.status == 200, r.raw


async def test_every_request_answers_503_when_its_connection_has_read_the_servers_goodbye(
    faulty: Faulty,
) -> None:
    c, a = faulty.client, faulty.agent
    routes: dict[str, Callable[[], Awaitable[Response]]] = {
        **database_routes(faulty),
        "facade": lambda: rpc(c, a.id, "tasks/get", {"id": "T1"}),
    }
    await asyncio.gather(*(c.call("GET", "/readyz") for _ in range(4)))
    # A stop's first half: the idle pooled connections have the server's error, not its close.
    faulty.proxy.say_goodbye()

    answers = await asyncio.gather(*(timed(call()) for call in routes.values()))

    for what, (r, elapsed) in zip(routes, answers, strict=True):
        if what == "facade":
            assert answer_of(r) == (200, 503), r.raw
        else:
            assert_unavailable(r, elapsed, what)
    faulty.proxy.set("down")
    faulty.proxy.set("up")
    await eventually(lambda: _ready(c), "the gateway ready again")


async def test_a_follow_up_whose_outcome_cannot_be_recorded_leaves_no_claim_held(
    faulty: Faulty, db: asyncpg.Connection
) -> None:
    faulty.flaky.mode = "hold"
    sent = asyncio.create_task(
        faulty.client.call("POST", faulty.agent.messages("T1"), {"text": "Paris"})
    )
    await eventually(lambda: _claimed(db), "the follow-up holds its claim")
    faulty.proxy.set("frozen")
    faulty.flaky.release.set()

    r, elapsed = await timed(sent)

    assert r.status == 200, r.raw  # the agent has the message; its answer is passed on
    assert elapsed < WITHIN_S + 0.5
    faulty.proxy.set("up")
    await eventually(lambda: _released(db), "the claim released")


async def _claimed(db: asyncpg.Connection) -> bool:
    return (await claim_of(db, "T1"))[0] is not None


async def _released(db: asyncpg.Connection) -> bool:
    return await claim_of(db, "T1") == (None, None)


def answer_of(r: Response) -> tuple[int, Any]:
    """The HTTP status, and for the façade's JSON-RPC errors the status they carry."""
    if r.status == 200 and r.headers.get("Content-Type", "").startswith("application/json"):
        error = r.json().get("error") if isinstance(r.json(), dict) else None
        if error is not None:
            return 200, error.get("data", {}).get("status")
    return r.status, None


async def test_no_route_answers_500_while_the_database_stops_and_starts(faulty: Faulty) -> None:
    c, a = faulty.client, faulty.agent
    routes: dict[str, Callable[[], Awaitable[Response]]] = {
        **database_routes(faulty),
        "metrics": lambda: c.call("GET", "/metrics"),
        "facade": lambda: rpc(c, a.id, "tasks/get", {"id": "T1"}),
    }
    await asyncio.gather(*(c.call("GET", "/readyz") for _ in range(2)))
    # The stop finds statements and connects in flight.
    faulty.proxy.set("frozen")
    pending = [asyncio.create_task(call()) for call in routes.values()]
    await eventually(lambda: faulty.proxy.held >= 4, "four connections held by the proxy")
    faulty.proxy.set("stopping")
    phases = {"stopping, in flight": await asyncio.gather(*pending)}
    restart: tuple[Mode, ...] = ("stopping", "down", "starting")
    for phase in restart:
        faulty.proxy.set(phase)
        phases[phase] = await asyncio.gather(*(call() for call in routes.values()))

    for phase, answers in phases.items():
        for what, r in zip(routes, answers, strict=True):
            status, carried = answer_of(r)
            assert status != 500 and carried != 500, (phase, what, r.raw)
            if status == 503:
                assert int(r.headers["Retry-After"]) > 0, (phase, what)
        assert answer_of(answers[list(routes).index("readyz")])[0] == 503, phase
        assert answer_of(answers[list(routes).index("facade")])[1] == 503, phase
    faulty.proxy.set("up")
    await eventually(lambda: _ready(c), "the gateway ready again")


async def _ready(client: Client) -> bool:
    return (await client.call("GET", "/readyz")).status == 200
