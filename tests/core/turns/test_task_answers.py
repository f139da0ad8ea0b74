"""`?answer=task` (core/turns/answers): a start or a follow-up answered with the stored task in
the gateway's shape, one shape for agents of either version, instead of the agent's body."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.support.agents import Agent, events, register_fake
from tests.support.client import TASK_FIELDS, Client, Response, assert_problem
from tests.support.fakes import StartFake, WeatherFake, rpc_error, rpc_result, task_body
from tests.support.sdk_agent import SdkAgent

JSON = dict[str, Any]
VERSIONS = ["1.0", "0.3"]
PROBLEM = "urn:a2a-continue:problem:"


async def register_sdk(client: Client, sdk: SdkAgent, version: str) -> str:
    body = {"name": "weather", "endpointUrl": sdk.url, "protocolVersion": version}
    r = await client.call("POST", "/v1/a2a/agents", body)
    assert r.status == 201, r.raw
    return str(r.json()["id"])


def as_task(r: Response) -> JSON:
    """The stored task a send answered with, checked as the gateway's shape."""
    assert r.status == 200, r.raw
    assert r.headers["Content-Type"] == "application/json"
    task: JSON = r.json()
    assert set(task) == TASK_FIELDS
    assert r.headers["A2A-Task-State"] == task["state"]
    return task


def shape(value: Any) -> Any:
    """The JSON shape of a value: member names and value types, all the way down."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return type(value).__name__


async def stored(client: Client, agent: str, task_id: str) -> JSON:
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks/{task_id}")
    assert r.status == 200, r.raw
    task: JSON = r.json()
    return task


async def test_a_start_with_answer_task_answers_one_task_shape_for_agents_of_both_versions(
    client: Client, sdk: SdkAgent
) -> None:
    tasks = {}
    for version in VERSIONS:
        agent = await register_sdk(client, sdk, version)
        r = await client.call("POST", f"/v1/a2a/{agent}/messages?answer=task", {"text": "hi"})
        tasks[version] = as_task(r)
        assert tasks[version] == await stored(client, agent, tasks[version]["id"])
        assert (tasks[version]["state"], tasks[version]["lastSeq"]) == ("input-required", 1)

    top = {name: shape(value) for name, value in tasks["1.0"].items() if name != "statusMessage"}
    assert top == {n: shape(v) for n, v in tasks["0.3"].items() if n != "statusMessage"}
    # The status message is the agent's own, as GET shows it: a message of its version.
    for task in tasks.values():
        assert set(task["statusMessage"]) >= {"messageId", "parts", "role"}


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_follow_up_with_answer_task_answers_the_stored_task(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent = await register_sdk(client, sdk, version)
    started = as_task(
        await client.call("POST", f"/v1/a2a/{agent}/messages?answer=task", {"text": "hi"})
    )
    path = f"/v1/a2a/{agent}/tasks/{started['id']}/messages?answer=task"

    task = as_task(await client.call("POST", path, {"text": "Paris"}))

    assert (task["id"], task["state"], task["lastSeq"]) == (started["id"], "completed", 2)
    assert task["artifacts"]
    assert task == await stored(client, agent, started["id"])


async def test_without_answer_task_a_send_answers_the_agents_body(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    for query in ("", "?answer=agent"):
        r = await client.call("POST", f"/v1/a2a/{agent.id}/messages{query}", {"text": "hi"})
        assert r.status == 200, r.raw
        assert r.json()["jsonrpc"] == "2.0"


async def test_an_unknown_answer_is_a_422_naming_the_query_parameter_before_the_agent_is_called(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    r = await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "hi"})
    task_id = r.json()["result"]["task"]["id"]

    for path in (f"/v1/a2a/{agent.id}/messages", agent.messages(task_id)):
        r = await client.call("POST", path + "?answer=bytes", {"text": "Paris"})
        problem = assert_problem(r, 422)
        assert problem["type"] == PROBLEM + "invalid-query"
        assert problem["errors"][0]["loc"] == "$.query.answer"
        assert "'agent' or 'task'" in problem["errors"][0]["msg"]
    assert len(agent.received) == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 1


async def test_a_follow_up_answered_with_a_message_shows_the_task_as_it_stays(
    client: Client, fake_agent: StartFake
) -> None:
    async def agent_fn(request: JSON) -> JSON:
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
        message = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "noted"}]}
        return rpc_result(request, {"message": message})

    agent = await register_fake(client, fake_agent, agent_fn)
    await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "hi"})

    task = as_task(await client.call("POST", agent.messages("T1") + "?answer=task", {"text": "x"}))

    assert (task["id"], task["state"], task["lastSeq"]) == ("T1", "input-required", 2)


def follows_up_with_an_error(request: JSON) -> JSON:
    if "taskId" not in request["params"]["message"]:
        return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
    return rpc_error(request, -32004, "not now")


async def test_an_agents_error_with_answer_task_is_a_502_kept_for_its_key(
    client: Client, fake_agent: StartFake
) -> None:
    async def agent_fn(request: JSON) -> JSON:
        return follows_up_with_an_error(request)

    agent = await register_fake(client, fake_agent, agent_fn)
    await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "hi"})
    path = agent.messages("T1") + "?answer=task"
    keyed = {"Idempotency-Key": "k1"}

    first = await client.call("POST", path, {"text": "x"}, headers=keyed)
    again = await client.call("POST", path, {"text": "x"}, headers=keyed)

    problem = assert_problem(first, 502)
    assert problem["type"] == PROBLEM + "agent-error"
    assert problem["agentError"] == {"code": -32004, "message": "not now"}
    assert (again.status, again.raw) == (502, first.raw)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(agent.received) == 2
    logged = await events(client, agent, "T1")
    assert [(e["type"], e["data"].get("error")) for e in logged][-1] == (
        "task_continued",
        {"code": -32004},
    )


async def test_a_start_answered_with_a_message_is_a_502_carrying_the_message(
    client: Client, fake_agent: StartFake
) -> None:
    message = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hello"}]}

    async def says_hello(request: JSON) -> JSON:
        return rpc_result(request, {"message": message})

    agent = await register_fake(client, fake_agent, says_hello)
    r = await client.call("POST", f"/v1/a2a/{agent.id}/messages?answer=task", {"text": "hi"})

    problem = assert_problem(r, 502)
    assert problem["type"] == PROBLEM + "agent-started-no-task"
    assert problem["agentMessage"] == message


async def test_a_keyed_start_with_answer_task_is_replayed_as_it_first_answered(
    client: Client, fake_agent: StartFake
) -> None:
    agent: Agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    path = f"/v1/a2a/{agent.id}/messages"
    keyed = {"Idempotency-Key": "k1"}
    first = await client.call("POST", path + "?answer=task", {"text": "hi"}, headers=keyed)
    task = as_task(first)
    moved = await client.call("POST", agent.messages(task["id"]), {"text": "Paris"})
    assert moved.status == 200, moved.raw

    again = await client.call("POST", path + "?answer=task", {"text": "hi"}, headers=keyed)
    other_mode = await client.call("POST", path, {"text": "hi"}, headers=keyed)

    assert (again.status, again.raw) == (200, first.raw)
    assert again.headers["A2A-Task-State"] == "input-required"
    assert again.headers["Idempotent-Replayed"] == "true"
    assert assert_problem(other_mode, 422)["type"] == PROBLEM + "idempotency-key-reused"
    assert len(agent.received) == 2


async def test_a_streamed_send_with_answer_task_streams_as_before(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    r = await client.call(
        "POST",
        f"/v1/a2a/{agent.id}/messages?answer=task",
        {"text": "hi"},
        headers={"Accept": "text/event-stream"},
    )
    assert r.status == 200, r.raw
    assert r.headers["Content-Type"].startswith("text/event-stream")
    assert b'"jsonrpc"' in r.raw
