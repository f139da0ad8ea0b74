"""Starting a task: POST /v1/a2a/{agent_id}/messages, against the a2a-sdk agent and fakes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web

from a2a_continue.a2a.protocol import AgentTask
from a2a_continue.app import create_app
from a2a_continue.core.tasks.store import record_new_task
from a2a_continue.settings import Settings
from tests.support.client import Client, register, token
from tests.support.fakes import Handler, StartFake
from tests.support.ports import dead_url
from tests.support.sdk_agent import SdkAgent
from tests.support.servers import serve_asgi

JSON = dict[str, Any]

BOB = token("bob@example.com")
SEND_METHOD = {"1.0": "SendMessage", "0.3": "message/send"}


def task_answer(request: JSON, state: str = "TASK_STATE_INPUT_REQUIRED") -> JSON:
    """A 1.0 answer with a task, echoing the request's JSON-RPC id."""
    task = {"id": "task-1", "contextId": "ctx-1", "status": {"state": state}}
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"task": task}}


async def answer_task(request: JSON) -> JSON:
    return task_answer(request)


async def task_count(db: asyncpg.Connection) -> int:
    return int(await db.fetchval("SELECT count(*) FROM a2a_tasks"))


# ---- against the a2a-sdk agent, as 1.0 and as 0.3 ------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_start_returns_the_agents_answer_with_the_task_state_header(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent = await register(client, sdk.url, version)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "weather?"})
    assert r.status == 200, r.raw
    assert r.headers["A2A-Task-State"] == "input-required"
    answer = r.json()
    assert answer["jsonrpc"] == "2.0"
    assert answer["id"] == sdk.received[-1]["id"]
    if version == "1.0":
        task = answer["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert task["status"]["message"]["parts"] == [{"text": "Which city?"}]
    else:
        task = answer["result"]
        assert (task["kind"], task["status"]["state"]) == ("task", "input-required")
        assert task["status"]["message"]["parts"] == [{"kind": "text", "text": "Which city?"}]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_start_stores_the_task_for_the_caller_with_task_created_event(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent, version: str
) -> None:
    agent = await register(client, sdk.url, version)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "weather?"})
    assert r.status == 200, r.raw
    result = r.json()["result"]
    task = result["task"] if version == "1.0" else result
    row = await db.fetchrow("SELECT * FROM a2a_tasks")
    assert row is not None
    assert (row["agent_id"], row["task_id"]) == (uuid.UUID(agent), task["id"])
    assert row["owner"] == "alice@example.com"
    assert row["state"] == "input-required"
    assert row["context_id"] == task["contextId"]
    assert row["team_id"] is None
    assert row["last_seq"] == 1
    events = await db.fetch("SELECT * FROM a2a_task_events WHERE task = $1", row["id"])
    assert [(e["seq"], e["type"], e["previous_state"], e["new_state"]) for e in events] == [
        (1, "task_created", None, "input-required")
    ]
    assert events[0]["actor"] == "alice@example.com"


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_start_speaks_the_agents_protocol_version(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent = await register(client, sdk.url, version)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "weather?"})
    assert r.status == 200, r.raw
    assert sdk.headers[-1]["a2a-version"] == version
    assert sdk.headers[-1]["content-type"] == "application/json"
    sent = sdk.received[-1]
    assert sent["method"] == SEND_METHOD[version]
    message = sent["params"]["message"]
    if version == "1.0":
        assert (message["role"], message["parts"]) == ("ROLE_USER", [{"text": "weather?"}])
    else:
        assert (message["kind"], message["role"]) == ("message", "user")
        assert message["parts"] == [{"kind": "text", "text": "weather?"}]
    assert "taskId" not in message


# ---- the answer is passed through as it came -----------------------------------------------


async def test_start_returns_the_agents_bytes_unchanged(
    client: Client, fake_agent: StartFake
) -> None:
    sent: list[bytes] = []

    async def handler(request: JSON) -> bytes:
        rpc_id: str = request["id"]
        raw = (
            b'{ "result" : {"task": {"status": {"state": "TASK_STATE_WORKING"},'
            b' "id": "task-1", "contextId": "ctx-1", "extra": "\\u00e9t\\u00e9"}},'
            b' "jsonrpc": "2.0", "id": "' + rpc_id.encode() + b'" }\n'
        )
        sent.append(raw)
        return raw

    agent = await register(client, (await fake_agent(handler)).url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    assert r.raw == sent[0]
    assert r.headers["A2A-Task-State"] == "working"


async def test_start_answered_with_a_message_stores_no_task(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    sent: list[bytes] = []

    async def handler(request: JSON) -> bytes:
        message = {"messageId": "m-1", "role": "ROLE_AGENT", "parts": [{"text": "Hello"}]}
        answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"message": message}}
        sent.append(msgspec.json.encode(answer))
        return sent[-1]

    agent = await register(client, (await fake_agent(handler)).url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    assert r.raw == sent[0]
    assert "A2A-Task-State" not in r.headers
    assert await task_count(db) == 0


# ---- the body rules --------------------------------------------------------------------------


async def test_start_rejects_a_task_id_and_points_to_the_continue_route(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(answer_task)
    agent = await register(client, fake.url)
    message = {"taskId": "task-9", "parts": [{"text": "Paris"}]}
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"message": message})
    assert r.status == 400, r.raw
    assert r.headers["Content-Type"] == "application/problem+json"
    continue_url = f"/v1/a2a/{agent}/tasks/task-9/messages"
    assert continue_url in r.json()["detail"]
    assert r.json()["continueUrl"] == continue_url
    assert fake.received == []
    assert await task_count(db) == 0


async def test_start_with_a_task_id_beside_the_message_is_shown_the_follow_up_route(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(answer_task)
    agent = await register(client, fake.url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "Paris", "taskId": "t/9"})
    assert r.status == 422, r.raw
    continue_url = f"/v1/a2a/{agent}/tasks/t%2F9/messages"
    [error] = r.json()["errors"]
    assert error["loc"] == "$.taskId"
    assert "unknown field `taskId`" in error["msg"]
    assert continue_url in error["msg"]
    assert continue_url in r.json()["detail"]
    assert r.json()["continueUrl"] == continue_url
    assert fake.received == []
    assert await task_count(db) == 0


@pytest.mark.parametrize("message", ["hi", ["hi"]], ids=["string", "array"])
async def test_start_with_a_message_that_is_not_an_object_is_told_how_to_send_text(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, message: Any
) -> None:
    fake = await fake_agent(answer_task)
    agent = await register(client, fake.url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"message": message})
    assert r.status == 422, r.raw
    [error] = r.json()["errors"]
    assert error["loc"] == "$.message"
    assert "an object with `parts`" in error["msg"]
    assert '{"text": "hi"}' in error["msg"]
    assert "Expected" not in r.json()["detail"]
    assert fake.received == []
    assert await task_count(db) == 0


async def test_start_refuses_a_context_id_the_store_cannot_keep_before_the_agent_is_called(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(answer_task)
    agent = await register(client, fake.url)
    message = {"contextId": "c" * 501, "parts": [{"text": "hi"}]}
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"message": message})
    assert r.status == 422, r.raw
    assert r.json()["errors"][0]["loc"] == "$.message.contextId"
    assert fake.received == []
    assert await task_count(db) == 0


async def test_start_rejects_a_team_the_caller_is_not_in(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(answer_task)
    agent = await register(client, fake.url)
    r = await client.as_(token(teams=["blue"])).call(
        "POST", f"/v1/a2a/{agent}/messages", {"text": "hi", "teamId": "red"}
    )
    assert r.status == 403, r.raw
    assert "red" in r.json()["detail"]
    assert fake.received == []
    assert await task_count(db) == 0


async def test_start_with_the_callers_team_gives_the_task_to_that_team(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register(client, (await fake_agent(answer_task)).url)
    r = await client.as_(token(teams=["red", "blue"])).call(
        "POST", f"/v1/a2a/{agent}/messages", {"text": "hi", "teamId": "blue"}
    )
    assert r.status == 200, r.raw
    row = await db.fetchrow("SELECT owner, team_id FROM a2a_tasks")
    assert row is not None
    assert (row["owner"], row["team_id"]) == ("alice@example.com", "blue")


@pytest.mark.parametrize("role", ["agent", "ROLE_AGENT", "system"])
async def test_start_rejects_a_role_other_than_user(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, role: str
) -> None:
    fake = await fake_agent(answer_task)
    agent = await register(client, fake.url)
    message = {"role": role, "parts": [{"text": "hi"}]}
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"message": message})
    assert r.status == 400, r.raw
    assert role in r.json()["detail"]
    assert fake.received == []
    assert await task_count(db) == 0


@pytest.mark.parametrize("role", ["user", "ROLE_USER"])
async def test_start_sends_the_users_role_and_its_own_message_id(
    client: Client, fake_agent: StartFake, role: str
) -> None:
    fake = await fake_agent(answer_task)
    agent = await register(client, fake.url)
    message = {"role": role, "messageId": "client-id", "parts": [{"kind": "text", "text": "hi"}]}
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"message": message})
    assert r.status == 200, r.raw
    sent = fake.received[0]["params"]["message"]
    assert sent["role"] == "ROLE_USER"
    assert sent["messageId"] != "client-id"
    assert sent["parts"] == [{"text": "hi"}]


async def test_start_on_an_agent_of_another_user_is_not_found(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(answer_task)
    agent = await register(client.as_(BOB), fake.url)  # private to bob
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 404, r.raw
    assert fake.received == []
    assert await task_count(db) == 0


@pytest.mark.parametrize("agent", [str(uuid.uuid4()), "not-a-uuid"], ids=["unknown", "malformed"])
async def test_start_on_an_unknown_agent_is_not_found(client: Client, agent: str) -> None:
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 404, r.raw
    assert r.headers["Content-Type"] == "application/problem+json"


# ---- an agent that fails: 502 / 504, nothing stored ------------------------------------------


async def test_start_on_an_unreachable_agent_is_502(client: Client, db: asyncpg.Connection) -> None:
    agent = await register(client, dead_url())
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 502, r.raw
    assert r.json()["type"].endswith("agent-unreachable")
    assert await task_count(db) == 0


async def _http_500(request: JSON) -> web.Response:
    return web.json_response(task_answer(request), status=500)


async def _not_json(request: JSON) -> bytes:
    return b"<html>busy</html>"


async def _other_rpc_id(request: JSON) -> JSON:
    return {**task_answer(request), "id": "not-" + str(request["id"])}


async def _not_a2a(request: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"hello": "world"}}


@pytest.mark.parametrize(
    "handler",
    [
        pytest.param(_http_500, id="non-2xx"),
        pytest.param(_not_json, id="not-json"),
        pytest.param(_other_rpc_id, id="wrong-jsonrpc-id"),
        pytest.param(_not_a2a, id="neither-task-nor-message"),
    ],
)
async def test_start_on_an_agent_answering_badly_is_502(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, handler: Handler
) -> None:
    agent = await register(client, (await fake_agent(handler)).url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 502, r.raw
    assert r.json()["type"].endswith("agent-bad-answer")
    assert await task_count(db) == 0


async def test_start_on_an_agent_slower_than_its_timeout_is_504(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    release = asyncio.Event()

    async def stall(request: JSON) -> JSON:
        await asyncio.wait_for(release.wait(), 5)
        return task_answer(request)

    agent = await register(client, (await fake_agent(stall)).url, timeoutSeconds=0.3)
    try:
        r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    finally:
        release.set()
    assert r.status == 504, r.raw
    assert "0.3" in r.json()["detail"]
    assert await task_count(db) == 0


@pytest.fixture
async def capped_client(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    """A client of a gateway that accepts agent answers of at most 2 KiB."""
    capped = msgspec.structs.replace(settings, max_agent_response_bytes=2048)
    async with serve_asgi(create_app(capped)) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


async def test_start_on_an_agent_answering_more_than_the_cap_is_502(
    capped_client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    async def huge(request: JSON) -> JSON:
        answer = task_answer(request)
        answer["result"]["task"]["artifacts"] = [{"parts": [{"text": "x" * 4096}]}]
        return answer

    agent = await register(capped_client, (await fake_agent(huge)).url)
    r = await capped_client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 502, r.raw
    assert "2048" in r.json()["detail"]
    assert await task_count(db) == 0


# ---- storing a task ----------------------------------------------------------------------------


async def test_storing_a_task_again_never_overwrites_a_terminal_state(
    client: Client, db: asyncpg.Connection
) -> None:
    agent = uuid.UUID(await register(client, dead_url()))
    artifacts = [{"parts": [{"text": "Sunny"}]}]
    done = AgentTask("task-1", "ctx-1", "completed", None, artifacts)
    again = AgentTask("task-1", "ctx-1", "working", {"parts": [{"text": "busy"}]}, [])
    first = await record_new_task(db, agent, done, "alice@example.com", None, {})
    second = await record_new_task(db, agent, again, "alice@example.com", None, {})
    assert first is not None and second is not None
    assert (first["state"], second["state"]) == ("completed", "completed")
    assert second["status_at"] == first["status_at"]
    row = await db.fetchrow("SELECT * FROM a2a_tasks")
    assert row is not None
    assert (row["state"], row["status_message"], row["artifacts"]) == ("completed", None, artifacts)
    assert row["completed_at"] is not None
    events = await db.fetch("SELECT seq, type FROM a2a_task_events WHERE task = $1", row["id"])
    assert [(e["seq"], e["type"]) for e in events] == [(1, "task_created")]


async def test_start_never_takes_over_a_task_id_recorded_for_another_caller(
    client: Client, fake_agent: StartFake, db: asyncpg.Connection
) -> None:
    agent = await fake_agent(answer_task)
    shared = await register(client, agent.url, visibility="public")
    r = await client.call("POST", f"/v1/a2a/{shared}/messages", {"text": "first"})
    assert r.status == 200, r.raw
    before = await db.fetchrow("SELECT * FROM a2a_tasks WHERE task_id = 'task-1'")

    r = await client.as_(BOB).call("POST", f"/v1/a2a/{shared}/messages", {"text": "same id"})

    assert r.status == 502
    assert r.json()["type"].endswith("agent-bad-answer")
    assert await db.fetchrow("SELECT * FROM a2a_tasks WHERE task_id = 'task-1'") == before
    r = await client.as_(BOB).call("GET", f"/v1/a2a/{shared}/tasks/task-1")
    assert r.status == 404
