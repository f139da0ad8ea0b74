"""One follow-up at a time per task, across separate gateway processes on one database."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from a2a_continue.settings import Settings
from tests.conftest import JWT_SECRET, Client, Response
from tests.core.test_continuation import (
    BUSY_TYPE,
    Agent,
    StartFake,
    assert_problem,
    events,
    register,
    rpc_result,
    start,
    task_body,
)

JSON = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
CLAIM_MARGIN_S = 0.5


@dataclass
class GatewayProcess:
    """A gateway running as its own ``a2a-continue serve`` process."""

    url: str
    process: asyncio.subprocess.Process
    log: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_until_healthy(gateway: GatewayProcess, session: aiohttp.ClientSession) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if gateway.process.returncode is not None:
            pytest.fail(f"the gateway exited:\n{gateway.log.read_text()}")
        try:
            async with session.get(gateway.url + "/healthz") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.05)
    pytest.fail(f"the gateway did not become healthy:\n{gateway.log.read_text()}")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


@pytest.fixture
async def spawn_gateway(
    database_url: str,
    settings: Settings,
    db: asyncpg.Connection,
    session: aiohttp.ClientSession,
    tmp_path: Path,
) -> AsyncIterator[Callable[[], Awaitable[GatewayProcess]]]:
    """Start gateway processes on the test database; every one is killed at the end."""
    started: list[GatewayProcess] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2AC_")}
    env.update(
        A2AC_DATABASE_URL=database_url,
        A2AC_JWT_SECRET=JWT_SECRET,
        A2AC_ENCRYPTION_KEY=settings.encryption_key,
        A2AC_CLAIM_MARGIN_S=str(CLAIM_MARGIN_S),
    )

    async def spawn() -> GatewayProcess:
        port = free_port()
        log = tmp_path / f"gateway-{port}.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "a2a_continue", "serve", "--port", str(port)),
                stdout=out,
                stderr=out,
                env=env,
                cwd=REPO,
            )
        gateway = GatewayProcess(f"http://127.0.0.1:{port}", process, log)
        started.append(gateway)
        await wait_until_healthy(gateway, session)
        return gateway

    try:
        yield spawn
    finally:
        for gateway in started:
            if gateway.process.returncode is None:
                gateway.process.kill()
            await gateway.process.wait()


class HeldAgent:
    """A 1.0 agent that asks for a city and holds its answer to the first follow-up."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.follow_ups = 0

    async def __call__(self, request: JSON) -> JSON:
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
        self.follow_ups += 1
        if self.follow_ups == 1:
            self.arrived.set()
            await self.release.wait()
        return rpc_result(request, task_body("1.0", "T1", "completed", "C1"))


@pytest.fixture
async def held(fake_agent: StartFake) -> AsyncIterator[tuple[HeldAgent, str, list[JSON]]]:
    agent = HeldAgent()
    fake = await fake_agent(agent)
    try:
        yield agent, fake.url, fake.received
    finally:
        agent.release.set()  # let the held handler finish before the agent shuts down


async def two_gateways(
    spawn: Callable[[], Awaitable[GatewayProcess]], session: aiohttp.ClientSession
) -> tuple[GatewayProcess, Client, GatewayProcess, Client]:
    a, b = await asyncio.gather(spawn(), spawn())
    return a, Client(a.url, session), b, Client(b.url, session)


def follow_up(client: Client, agent: Agent) -> asyncio.Task[Response]:
    return asyncio.create_task(client.call("POST", agent.messages("T1"), {"text": "Paris"}))


async def test_two_gateways_let_one_follow_up_through_and_refuse_the_other(
    spawn_gateway: Callable[[], Awaitable[GatewayProcess]],
    session: aiohttp.ClientSession,
    held: tuple[HeldAgent, str, list[JSON]],
) -> None:
    agent_script, url, received = held
    _, via_a, _, via_b = await two_gateways(spawn_gateway, session)
    agent = await register(via_a, url, "1.0", received, timeoutSeconds=10)
    await start(via_a, agent)

    pending = {follow_up(via_a, agent), follow_up(via_b, agent)}
    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)

    [refused] = [t.result() for t in done]
    assert assert_problem(refused, 409)["type"] == BUSY_TYPE
    # The refusal may come back before the claimed follow-up has reached the agent.
    await asyncio.wait_for(agent_script.arrived.wait(), 10)
    assert agent_script.follow_ups == 1
    agent_script.release.set()
    [answered] = [await t for t in pending]
    assert answered.status == 200, answered.raw
    assert answered.headers["A2A-Task-State"] == "completed"
    assert agent_script.follow_ups == 1
    logged = await events(via_b, agent, "T1")
    assert [e["type"] for e in logged] == ["task_created", "task_continued"]


async def test_claim_of_a_killed_gateway_holds_until_it_expires(
    spawn_gateway: Callable[[], Awaitable[GatewayProcess]],
    session: aiohttp.ClientSession,
    db: asyncpg.Connection,
    held: tuple[HeldAgent, str, list[JSON]],
) -> None:
    agent_script, url, received = held
    a, via_a, _, via_b = await two_gateways(spawn_gateway, session)
    agent = await register(via_a, url, "1.0", received, timeoutSeconds=1)
    await start(via_a, agent)
    doomed = follow_up(via_a, agent)
    await agent_script.arrived.wait()

    a.process.kill()
    await a.process.wait()
    with pytest.raises(aiohttp.ClientError):
        await doomed

    r = await via_b.call("POST", agent.messages("T1"), {"text": "Paris"})
    assert assert_problem(r, 409)["type"] == BUSY_TYPE
    assert agent_script.follow_ups == 1
    left = await db.fetchval(
        "SELECT extract(epoch FROM claim_expires_at - now()) FROM a2a_tasks WHERE task_id = 'T1'"
    )
    assert 0 < left <= 1 + CLAIM_MARGIN_S
    await asyncio.sleep(float(left) + 0.05)

    r = await via_b.call("POST", agent.messages("T1"), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert r.headers["A2A-Task-State"] == "completed"
    assert agent_script.follow_ups == 2
    logged = await events(via_b, agent, "T1")
    assert [(e["seq"], e["type"]) for e in logged] == [
        (1, "task_created"),
        (2, "task_continue_failed"),
        (3, "task_continued"),
    ]
    assert logged[1]["data"]["reason"] == "claim-expired"
    claim = await db.fetchrow(
        "SELECT claim_token, claim_expires_at FROM a2a_tasks WHERE task_id = 'T1'"
    )
    assert claim is not None
    assert tuple(claim) == (None, None)
