"""A real PostgreSQL that stops and starts (or freezes, then stops) under reads and writes:
every request needing it answers 503 with Retry-After within the bound, never a 500."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import aiohttp
import pytest

from a2a_continue.app import create_app
from a2a_continue.core.schema import migrate_url
from a2a_continue.runtime.secrets import new_key
from a2a_continue.settings import Settings
from tests.support.agents import Agent, register_fake
from tests.support.client import JWT_SECRET, Client, Response
from tests.support.fakes import Scripted, StartFake, task_v10
from tests.support.own_postgres import OwnPostgres, own_postgres
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually

# The database bound of the gateway; every answer comes within it plus this margin (a busy
# machine's scheduling, the agent's own call).
DB_TIMEOUT_S = 1.0
MARGIN_S = 1.5
ROUNDS = 5
READERS = 4
WRITERS = 3
# What a refusal may be: the database's 503, or (once it is back) a follow-up finding its
# task's claim still held by an answer being recorded in the background. Both say when.
REFUSALS = {
    503: "urn:a2a-continue:problem:database-unavailable",
    409: "urn:a2a-continue:problem:task-busy",
}
# What each round must see both refused (while the server is away) and served again: the
# two reads, and a write (a writer whose task was busy starts another, so either kind).
ROUTES = {"task", "readyz", "write"}
WRITES = {"start", "follow-up"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[OwnPostgres]:
    """A PostgreSQL of this module's own, migrated (the run's server is never stopped)."""
    with own_postgres(OwnPostgres) as server:

        async def prepare() -> None:
            await server.start()
            await migrate_url(server.url)
            await server.stop()

        asyncio.run(prepare())
        yield server


@dataclass
class Answer:
    """One request of the load: its route, when it went, how long it took, what it got."""

    route: str
    sent: float
    took: float
    status: int
    problem: str | None
    retry_after: str | None


@dataclass
class Load:
    """Readers and writers calling the gateway until told to stop; every answer kept."""

    client: Client
    agent: Agent
    answers: list[Answer] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def call(self, route: str, method: str, path: str, body: Any = None) -> Response:
        sent = time.monotonic()
        r = await self.client.call(method, path, body)
        problem = r.json().get("type") if r.status >= 400 else None
        took = time.monotonic() - sent
        self.answers.append(
            Answer(route, sent, took, r.status, problem, r.headers.get("Retry-After"))
        )
        return r

    async def start(self) -> str | None:
        """Start a task; its id, or None when refused."""
        path = f"/v1/a2a/{self.agent.id}/messages"
        r = await self.call("start", "POST", path, {"text": "weather?"})
        return str(r.json()["result"]["task"]["id"]) if r.status == 200 else None

    async def reader(self, task_id: str) -> None:
        while not self.stopping.is_set():
            await self.call("task", "GET", self.agent.task(task_id))
            await self.call("readyz", "GET", "/readyz")

    async def writer(self) -> None:
        """Follow up one task again and again; start another when refused as busy."""
        task_id: str | None = None
        while not self.stopping.is_set():
            if task_id is None:
                task_id = await self.start()
                continue
            path = self.agent.messages(task_id)
            r = await self.call("follow-up", "POST", path, {"text": "Paris"})
            if r.status == 409:
                task_id = None

    def since(self, began: float) -> list[Answer]:
        return [a for a in self.answers if a.sent >= began]


def every_route(load: Load, status: int, since: float) -> bool:
    """Whether each of ``ROUTES`` got ``status`` to a request sent at ``since`` or later."""
    seen = {a.route for a in load.since(since) if a.status == status}
    return (seen | ({"write"} if seen & WRITES else set())) >= ROUTES


def asks_again(request: dict[str, Any]) -> dict[str, Any]:
    """The agent's answer to any message: the task (a new one for a start) wants more."""
    task_id = request["params"]["message"].get("taskId") or str(uuid.uuid4())
    return task_v10(task_id, "input-required")


@pytest.fixture
async def load(cluster: OwnPostgres, fake_agent: StartFake) -> AsyncIterator[Load]:
    """A gateway on the module's own server with one agent, and the load (not yet running)."""
    settings = Settings(
        database_url=cluster.url,
        jwt_secret=JWT_SECRET,
        encryption_key=new_key(),
        db_timeout_s=DB_TIMEOUT_S,
        agent_timeout_s=30.0,
        pool_size=4,
    )
    await cluster.start()
    try:
        async with serve_asgi(create_app(settings)) as base, aiohttp.ClientSession() as session:
            client = Client(base, session)
            agent = await register_fake(client, fake_agent, Scripted(asks_again, asks_again))
            yield Load(client, agent)
    finally:
        cluster.thaw()
        if cluster.running():
            await cluster.stop()


# What a round does to the server: the fault, then its end.
Step = Callable[[], Awaitable[None]]


async def run_rounds(load: Load, fault: Step, back: Step, rounds: int = ROUNDS) -> None:
    """Under the load: ``rounds`` times, once every route is served, play ``fault`` until
    every route is refused, then ``back``; end once every route is served again."""
    tasks = [await load.start() for _ in range(2)]
    assert None not in tasks
    workers = [asyncio.create_task(load.reader(str(tasks[i % 2]))) for i in range(READERS)]
    workers += [asyncio.create_task(load.writer()) for _ in range(WRITERS)]
    try:
        for _ in range(rounds):
            began = time.monotonic()
            await eventually(partial(every_route, load, 200, began), "every route served")
            down = time.monotonic()
            await fault()
            await eventually(partial(every_route, load, 503, down), "every route refused")
            await back()
        began = time.monotonic()
        await eventually(partial(every_route, load, 200, began), "every route served at last")
    finally:
        load.stopping.set()
        await asyncio.gather(*workers)


def assert_no_500(load: Load) -> None:
    """Every answer in time; every refusal a 503 (or a busy task's 409) with Retry-After."""
    for a in load.answers:
        assert a.status in (200, *REFUSALS), a
        if a.status != 200:
            assert a.problem == REFUSALS[a.status], a
            assert a.retry_after is not None and int(a.retry_after) > 0, a
        assert a.took < DB_TIMEOUT_S + MARGIN_S, a


async def test_no_request_answers_500_while_postgresql_stops_and_starts_under_load(
    cluster: OwnPostgres, load: Load
) -> None:
    # A fast stop, as a restart or a failover does: each session gets 57P01 and is closed,
    # idle pooled connections included; new ones are refused until the server is back.
    await run_rounds(load, cluster.stop, cluster.start)

    assert_no_500(load)


async def test_no_request_answers_500_when_a_frozen_postgresql_is_stopped_under_load(
    cluster: OwnPostgres, load: Load
) -> None:
    async def thaw_and_restart() -> None:
        # The statements the bound cut are still being cancelled when the stop comes.
        cluster.thaw()
        await cluster.stop()
        await cluster.start()

    async def freeze() -> None:
        cluster.freeze()

    await run_rounds(load, freeze, thaw_and_restart, rounds=3)

    assert_no_500(load)
