"""One follow-up at a time per task, across separate gateway processes on one database."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.support.agents import BUSY_TYPE, Agent, events, register, start
from tests.support.client import Client, Response, assert_problem
from tests.support.database import TASKS_WITH_CLAIMS
from tests.support.fakes import HeldAgent
from tests.support.processes import CLAIM_MARGIN_S, GatewayProcess, two_gateways

JSON = dict[str, Any]


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
        "SELECT extract(epoch FROM expires_at - now())"
        f" FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T1'"
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
        "SELECT token AS claim_token, expires_at AS claim_expires_at"
        f" FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T1'"
    )
    assert claim is not None
    assert tuple(claim) == (None, None)
