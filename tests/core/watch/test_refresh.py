"""``GET …/tasks/{task_id}?refresh=true`` (SPEC §8.4): ask the agent now, record what changed."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from a2a_continue.core.watch.refresh import refresh_param
from tests.support.agents import Agent, events, register_fake
from tests.support.client import TASK_FIELDS, Client, assert_problem, token
from tests.support.fakes import StartFake, rpc_error, rpc_result, task_status
from tests.support.ports import dead_url

JSON = dict[str, Any]


class Reporting:
    """A 1.0 agent: starts T1 asking for a city; GetTask answers with the next scripted step."""

    def __init__(self, *steps: JSON | int) -> None:
        self.steps = list(steps)
        self.gets = 0
        self.delay = 0.0

    async def __call__(self, request: JSON) -> JSON:
        if request["method"] != "GetTask":
            first = {
                "id": "T1",
                "contextId": "C1",
                "status": task_status("input-required", "City?"),
            }
            return rpc_result(request, {"task": first})
        self.gets += 1
        await asyncio.sleep(self.delay)
        step = self.steps.pop(0)
        if isinstance(step, int):
            return rpc_error(request, step, "Task not found")
        return rpc_result(request, step)


def task(state: str, text: str, message_id: str, artifacts: list[JSON] | None = None) -> JSON:
    reported: JSON = {"id": "T1", "contextId": "C1", "status": task_status(state, text, message_id)}
    if artifacts is not None:
        reported["artifacts"] = artifacts
    return reported


async def refresh(client: Client, agent: Agent, task_id: str = "T1") -> Any:
    return await client.call("GET", agent.task(task_id) + "?refresh=true")


async def started(client: Client, fake_agent: StartFake, script: Reporting) -> Agent:
    agent = await register_fake(client, fake_agent, script)
    r = await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "weather?"})
    assert r.status == 200, r.raw
    return agent


async def test_refresh_records_a_change_once_and_nothing_when_unchanged(
    client: Client, fake_agent: StartFake
) -> None:
    script = Reporting(
        task("input-required", "City?", "City?"),
        task("input-required", "Which country?", "m2"),
        task("input-required", "Which country?", "m2"),
    )
    agent = await started(client, fake_agent, script)

    unchanged = await refresh(client, agent)
    assert unchanged.status == 200, unchanged.raw
    assert set(unchanged.json()) == TASK_FIELDS
    assert unchanged.json()["lastSeq"] == 1

    changed = await refresh(client, agent)
    assert changed.status == 200, changed.raw
    assert changed.json()["statusMessage"]["messageId"] == "m2"
    assert changed.json()["lastSeq"] == 2

    again = await refresh(client, agent)
    assert again.json()["lastSeq"] == 2
    assert script.gets == 3
    logged = await events(client, agent, "T1")
    assert [(e["type"], e["newState"]) for e in logged] == [
        ("task_created", "input-required"),
        ("task_updated", "input-required"),
    ]
    assert logged[1]["data"] == {"source": "refresh"}
    assert logged[1]["actor"] == "alice@example.com"
    assert [r["params"] for r in agent.received if r["method"] == "GetTask"] == [{"id": "T1"}] * 3


async def test_refresh_records_completion_with_the_changed_artifacts(
    client: Client, fake_agent: StartFake
) -> None:
    forecast = {"artifactId": "f1", "name": "forecast", "parts": [{"text": "Sunny"}]}
    script = Reporting(task("completed", "Done", "m3", [forecast]))
    agent = await started(client, fake_agent, script)

    r = await refresh(client, agent)

    assert r.status == 200, r.raw
    stored = r.json()
    assert (stored["state"], stored["artifacts"]) == ("completed", [forecast])
    assert stored["completedAt"] is not None
    logged = (await events(client, agent, "T1"))[-1]
    assert (logged["type"], logged["previousState"], logged["newState"]) == (
        "task_updated",
        "input-required",
        "completed",
    )
    assert logged["data"] == {"source": "refresh", "artifactIds": ["f1"]}


async def test_refresh_of_a_terminal_task_returns_it_without_asking(
    client: Client, fake_agent: StartFake
) -> None:
    script = Reporting(task("completed", "Done", "m3"))
    agent = await started(client, fake_agent, script)
    await refresh(client, agent)

    r = await refresh(client, agent)

    assert r.status == 200, r.raw
    assert r.json()["state"] == "completed"
    assert script.gets == 1


async def test_refresh_agent_answering_an_error_is_502_and_records_nothing(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await started(client, fake_agent, Reporting(-32001))

    r = await refresh(client, agent)

    problem = assert_problem(r, 502)
    assert problem["agentError"]["code"] == -32001
    assert [e["type"] for e in await events(client, agent, "T1")] == ["task_created"]
    assert await db.fetchval("SELECT state FROM a2a_tasks") == "input-required"


async def test_refresh_agent_unreachable_is_502(client: Client, fake_agent: StartFake) -> None:
    agent = await started(client, fake_agent, Reporting())
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent.id}", {"endpointUrl": dead_url()})
    assert r.status == 200, r.raw

    r = await refresh(client, agent)

    assert assert_problem(r, 502)["type"].endswith(":agent-unreachable")
    assert (await client.call("GET", agent.task("T1"))).json()["lastSeq"] == 1


async def test_refresh_agent_too_slow_is_504(client: Client, fake_agent: StartFake) -> None:
    script = Reporting(task("completed", "Done", "m3"))
    script.delay = 1.0
    agent = await register_fake(client, fake_agent, script, timeoutSeconds=0.2)
    await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "weather?"})

    r = await refresh(client, agent)

    assert assert_problem(r, 504)["type"].endswith(":agent-timeout")
    assert (await client.call("GET", agent.task("T1"))).json()["state"] == "input-required"


async def test_refresh_of_an_invisible_task_is_404_without_asking(
    client: Client, fake_agent: StartFake
) -> None:
    script = Reporting(task("completed", "Done", "m3"))
    agent = await started(client, fake_agent, script)

    r = await client.call("GET", agent.task("T1") + "?refresh=true", bearer=token("bob@x.org"))

    assert_problem(r, 404)
    assert script.gets == 0


async def test_refresh_parameter_must_be_a_boolean(client: Client, fake_agent: StartFake) -> None:
    agent = await started(client, fake_agent, Reporting())

    r = await client.call("GET", agent.task("T1") + "?refresh=soon")

    problem = assert_problem(r, 422)
    assert problem["errors"][0]["loc"] == "$.query.refresh"
    assert refresh_param({"refresh": "TRUE"}) and refresh_param({"refresh": "1"})
    assert not refresh_param({"refresh": "false"}) and not refresh_param({})


async def test_plain_read_does_not_ask_the_agent(client: Client, fake_agent: StartFake) -> None:
    script = Reporting(task("completed", "Done", "m3"))
    agent = await started(client, fake_agent, script)

    r = await client.call("GET", agent.task("T1") + "?refresh=false")

    assert r.status == 200, r.raw
    assert r.json()["state"] == "input-required"
    assert script.gets == 0
