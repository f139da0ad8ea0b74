"""Cancelling a task: POST /v1/a2a/{agent_id}/tasks/{task_id}/cancel."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from tests.support.client import TASK_FIELDS, Client, register
from tests.support.fakes import Handler, Scripted, StartFake, task_v10
from tests.support.ports import dead_url
from tests.support.sdk_agent import SdkAgent

JSON = dict[str, Any]
Snapshot = tuple[Any, list[Any]]

ALICE = "alice@example.com"
CANCEL_METHOD = {"1.0": "CancelTask", "0.3": "tasks/cancel"}


async def start(client: Client, agent: str, text: str = "weather?") -> str:
    """Start a task through the gateway; return the agent's task id."""
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": text})
    assert r.status == 200, r.raw
    result = r.json()["result"]
    return str(result["task"]["id"] if "task" in result else result["id"])


async def snapshot(db: asyncpg.Connection) -> Snapshot:
    """The task row and its events, to show that a refused cancel touched nothing."""
    row = await db.fetchrow("SELECT * FROM a2a_tasks")
    events = await db.fetch("SELECT * FROM a2a_task_events ORDER BY seq")
    return row, events


def cancel_agent(on_cancel: Handler) -> Handler:
    """A 1.0 agent that starts task-1 in input-required and answers a cancel with ``on_cancel``."""

    async def handler(request: JSON) -> Any:
        if request["method"] == "CancelTask":
            return await on_cancel(request)
        task = {
            "id": "task-1",
            "contextId": "ctx-1",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
        }
        return {"jsonrpc": "2.0", "id": request["id"], "result": {"task": task}}

    return handler


async def cancels(request: JSON) -> JSON:
    task = {"id": "task-1", "contextId": "ctx-1", "status": {"state": "TASK_STATE_CANCELED"}}
    return {"jsonrpc": "2.0", "id": request["id"], "result": task}


def rpc_error(code: int, message: str) -> Handler:
    async def answer(request: JSON) -> JSON:
        error = {"code": code, "message": message}
        return {"jsonrpc": "2.0", "id": request["id"], "error": error}

    return answer


# ---- against the a2a-sdk agent, as 1.0 and as 0.3 ------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_cancel_returns_the_task_in_the_gateway_shape_as_canceled(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent, version: str
) -> None:
    agent = await register(client, sdk.url, version)
    task = await start(client, agent)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 200, r.raw
    assert r.headers["Content-Type"] == "application/json"
    body = r.json()
    assert set(body) == TASK_FIELDS
    assert (body["agentId"], body["id"], body["owner"]) == (agent, task, ALICE)
    assert (body["state"], body["lastSeq"]) == ("canceled", 2)
    assert body["completedAt"] is not None
    row = await db.fetchrow("SELECT state, completed_at FROM a2a_tasks")
    assert row is not None
    assert row["state"] == "canceled"
    assert row["completed_at"] is not None


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_cancel_logs_task_canceled_after_task_created(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent = await register(client, sdk.url, version)
    task = await start(client, agent)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 200, r.raw
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks/{task}/events")
    assert r.status == 200, r.raw
    events = r.json()["events"]
    assert [(e["seq"], e["type"], e["previousState"], e["newState"]) for e in events] == [
        (1, "task_created", None, "input-required"),
        (2, "task_canceled", "input-required", "canceled"),
    ]
    assert events[1]["actor"] == ALICE
    assert r.json()["nextAfter"] == 2


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_cancel_speaks_the_agents_protocol_version(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent = await register(client, sdk.url, version)
    task = await start(client, agent)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 200, r.raw
    sent = sdk.received[-1]
    assert (sent["jsonrpc"], sent["method"], sent["params"]) == (
        "2.0",
        CANCEL_METHOD[version],
        {"id": task},
    )
    assert sent["id"] != sdk.received[0]["id"]
    assert sdk.headers[-1]["a2a-version"] == version


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_cancel_of_a_canceled_task_is_409_naming_canceled(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent, version: str
) -> None:
    agent = await register(client, sdk.url, version)
    task = await start(client, agent)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 200, r.raw
    before, calls = await snapshot(db), len(sdk.received)

    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 409, r.raw
    assert r.headers["Content-Type"] == "application/problem+json"
    problem = r.json()
    assert problem["type"].endswith("task-terminal")
    assert problem["state"] == "canceled"
    assert "canceled" in problem["detail"]
    assert await snapshot(db) == before
    assert len(sdk.received) == calls


async def test_cancel_of_a_task_completed_on_a_1_0_agent_is_409_naming_completed(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent
) -> None:
    agent = await register(client, sdk.url, "1.0")
    task = await start(client, agent, "now")  # the agent answers TASK_STATE_COMPLETED
    before = await snapshot(db)
    assert before[0]["state"] == "completed"

    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 409, r.raw
    assert r.json()["state"] == "completed"
    assert "completed" in r.json()["detail"]
    assert await snapshot(db) == before
    assert len(sdk.received) == 1


# ---- agents that refuse or fail ------------------------------------------------------------


async def test_cancel_refused_by_the_agent_is_409_and_leaves_the_task(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(cancel_agent(rpc_error(-32002, "Task cannot be canceled")))
    agent = await register(client, fake.url)
    task = await start(client, agent)
    before = await snapshot(db)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 409, r.raw
    assert r.json()["type"].endswith("task-not-cancelable")
    assert "Task cannot be canceled" in r.json()["detail"]
    assert await snapshot(db) == before
    assert fake.received[-1]["method"] == "CancelTask"


async def test_cancel_answered_with_another_agent_error_is_502_and_leaves_the_task(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(cancel_agent(rpc_error(-32001, "Task not found")))
    agent = await register(client, fake.url)
    task = await start(client, agent)
    before = await snapshot(db)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 502, r.raw
    assert r.json()["agentError"] == {"code": -32001, "message": "Task not found"}
    assert await snapshot(db) == before


async def test_cancel_on_an_unreachable_agent_is_502_and_leaves_the_task(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register(client, (await fake_agent(cancel_agent(cancels))).url)
    task = await start(client, agent)
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent}", {"endpointUrl": dead_url()})
    assert r.status == 200, r.raw
    before = await snapshot(db)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 502, r.raw
    assert r.json()["type"].endswith("agent-unreachable")
    assert await snapshot(db) == before


async def test_cancel_on_an_agent_slower_than_its_timeout_is_504_and_leaves_the_task(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    release = asyncio.Event()

    async def stall(request: JSON) -> JSON:
        await asyncio.wait_for(release.wait(), 5)
        return await cancels(request)

    fake = await fake_agent(cancel_agent(stall))
    agent = await register(client, fake.url, timeoutSeconds=0.3)
    task = await start(client, agent)
    before = await snapshot(db)
    try:
        r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    finally:
        release.set()
    assert r.status == 504, r.raw
    assert r.json()["type"].endswith("agent-timeout")
    assert await snapshot(db) == before


# ---- the body ----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"", b"{}", b"  {}\n"], ids=["empty", "empty-object", "spaced"])
async def test_cancel_accepts_an_empty_body_or_an_empty_object(
    client: Client, fake_agent: StartFake, body: bytes
) -> None:
    agent = await register(client, (await fake_agent(cancel_agent(cancels))).url)
    task = await start(client, agent)
    headers = {"Content-Type": "application/json"}
    r = await client.call(
        "POST", f"/v1/a2a/{agent}/tasks/{task}/cancel", data=body, headers=headers
    )
    assert r.status == 200, r.raw
    assert r.json()["state"] == "canceled"


@pytest.mark.parametrize(
    "body",
    [b'{"reason": "changed my mind"}', b"[]", b"null", b'"cancel"', b"not json"],
    ids=["member", "array", "null", "string", "not-json"],
)
async def test_cancel_rejects_a_body_other_than_empty_or_an_empty_object(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, body: bytes
) -> None:
    fake = await fake_agent(cancel_agent(cancels))
    agent = await register(client, fake.url)
    task = await start(client, agent)
    before = await snapshot(db)
    headers = {"Content-Type": "application/json"}
    r = await client.call(
        "POST", f"/v1/a2a/{agent}/tasks/{task}/cancel", data=body, headers=headers
    )
    assert r.status == 422, r.raw
    assert r.json()["errors"]
    assert await snapshot(db) == before
    assert [m["method"] for m in fake.received] == ["SendMessage"]


# ---- cancel answered with another task than the one asked about --------------------------


async def test_cancel_answered_with_another_tasks_id_is_502_and_leaves_the_task(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted(cancel=lambda r: task_v10("T2", "canceled"))
    fake = await fake_agent(script)
    agent = await register(client, fake.url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    before = [dict(row) for row in await db.fetch("SELECT * FROM a2a_tasks")]

    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/cancel")

    assert r.status == 502, r.raw
    assert r.headers["Content-Type"].startswith("application/problem+json")
    assert "'T2'" in r.json()["detail"]
    assert [dict(row) for row in await db.fetch("SELECT * FROM a2a_tasks")] == before
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 1
