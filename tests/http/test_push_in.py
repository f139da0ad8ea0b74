"""``POST /v1/a2a/push-in/{config_id}`` (SPEC §19): what an agent may push, and each refusal."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import httpx
import msgspec
import pytest

from a2a_continue.app import ROUTES, create_app
from a2a_continue.http.limited import counted
from a2a_continue.http.routes import PUBLIC
from a2a_continue.settings import Settings
from tests.support.agents import Agent, events, register_fake
from tests.support.client import Client, assert_problem
from tests.support.fakes import StartFake, rpc_result, task_v10
from tests.support.metrics import moved, scrape
from tests.support.ports import free_port
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually
from tests.support.watching import fast, settles_as

JSON = dict[str, Any]
PUSHES = {"streaming": False, "pushNotifications": True}
LIMIT = 4096


@pytest.fixture
async def gateway(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    port = free_port()
    configured = fast(
        settings,
        public_url=f"http://127.0.0.1:{port}",
        push_in_check_s=30.0,
        max_agent_response_bytes=LIMIT,
    )
    async with (
        serve_asgi(create_app(configured), port=port) as base,
        aiohttp.ClientSession() as session,
    ):
        yield Client(base, session)


async def working_task(client: Client, fake_agent: StartFake) -> tuple[Agent, JSON]:
    """Start T1 (left working) on an agent that pushes; return it and the config it was given."""

    async def handler(request: JSON) -> JSON:
        return rpc_result(request, task_v10("T1", "working"))

    agent = await register_fake(client, fake_agent, handler, capabilities=PUSHES)
    body = {"text": "go", "configuration": {"returnImmediately": True}}
    r = await client.call("POST", f"/v1/a2a/{agent.id}/messages", body)
    assert r.status == 200, r.raw
    config: JSON = agent.received[0]["params"]["configuration"]["taskPushNotificationConfig"]
    return agent, config


async def push(
    client: Client, config: JSON, body: Any, token: str | None = "", **headers: str
) -> Any:
    sent = dict(headers)
    use = config["token"] if token == "" else token
    if use is not None:
        sent["X-A2A-Notification-Token"] = use
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    sent.setdefault("Content-Type", "application/json")
    path = f"/v1/a2a/push-in/{config['id']}"
    return await client.call("POST", path, data=data, bearer=None, headers=sent)


def status_update(task_id: str, state: str, text: str) -> JSON:
    return {
        "statusUpdate": {
            "taskId": task_id,
            "contextId": "C1",
            "status": {
                "state": "TASK_STATE_" + state.upper().replace("-", "_"),
                "message": {"messageId": text, "role": "ROLE_AGENT", "parts": [{"text": text}]},
            },
        }
    }


def test_pushes_are_not_counted_by_the_fair_share_limits() -> None:
    (route,) = [r for r in ROUTES if r.path.startswith("/v1/a2a/push-in/")]
    assert (route.method, route.permission, counted(route)) == ("POST", PUBLIC, False)


async def test_a_push_with_its_token_is_recorded_and_a_repeat_adds_nothing(
    gateway: Client, fake_agent: StartFake
) -> None:
    agent, config = await working_task(gateway, fake_agent)
    before = await scrape(gateway)

    r = await push(gateway, config, status_update("T1", "working", "half way"))
    assert r.status == 204, r.raw
    r = await push(gateway, config, status_update("T1", "working", "half way"))
    assert r.status == 204, r.raw

    logged = await events(gateway, agent, "T1")
    assert [(e["type"], e["data"]) for e in logged[1:]] == [("task_updated", {"source": "push"})]
    assert logged[-1]["actor"] == "a2a-continue"
    after = await scrape(gateway)
    assert moved(before, after, "a2ac_push_in_total", outcome="recorded") == 1
    assert moved(before, after, "a2ac_push_in_total", outcome="unchanged") == 1


async def test_a_bearer_token_is_accepted_too(gateway: Client, fake_agent: StartFake) -> None:
    agent, config = await working_task(gateway, fake_agent)
    bearer = {"Authorization": f"Bearer {config['token']}"}
    r = await push(gateway, config, status_update("T1", "input-required", "City?"), None, **bearer)
    assert r.status == 204, r.raw
    await settles_as(gateway, agent, "T1", "input-required")


@pytest.mark.parametrize("token", [None, "not-the-token"], ids=["none", "wrong"])
async def test_a_push_without_its_token_is_401_and_records_nothing(
    gateway: Client, fake_agent: StartFake, db: asyncpg.Connection, token: str | None
) -> None:
    agent, config = await working_task(gateway, fake_agent)
    before = await scrape(gateway)
    r = await push(gateway, config, status_update("T1", "completed", "done"), token)
    assert_problem(r, 401)
    after = await scrape(gateway)
    assert moved(before, after, "a2ac_push_in_total", outcome="unauthorized") == 1
    assert [e["type"] for e in await events(gateway, agent, "T1")] == ["task_created"]
    failed = "SELECT failed_at IS NOT NULL FROM a2a_push_in WHERE id = $1::uuid"
    assert await db.fetchval(failed, config["id"])


async def test_an_unknown_or_malformed_config_is_404(
    gateway: Client, fake_agent: StartFake
) -> None:
    _, config = await working_task(gateway, fake_agent)
    unknown = {**config, "id": str(uuid.uuid4())}
    assert_problem(await push(gateway, unknown, status_update("T1", "working", "x")), 404)
    malformed = {**config, "id": "not-a-uuid"}
    assert_problem(await push(gateway, malformed, status_update("T1", "working", "x")), 404)


async def test_a_push_to_an_ended_task_is_404(gateway: Client, fake_agent: StartFake) -> None:
    agent, config = await working_task(gateway, fake_agent)
    r = await push(gateway, config, status_update("T1", "completed", "done"))
    assert r.status == 204, r.raw
    await settles_as(gateway, agent, "T1", "completed")

    r = await push(gateway, config, status_update("T1", "failed", "late"))
    assert_problem(r, 404)
    assert (await events(gateway, agent, "T1"))[-1]["newState"] == "completed"


async def test_a_push_of_a_task_whose_watch_gave_up_is_404(
    gateway: Client, fake_agent: StartFake, db: asyncpg.Connection
) -> None:
    _, config = await working_task(gateway, fake_agent)
    await db.execute("UPDATE a2a_tasks SET watch_failed_at = now() WHERE task_id = 'T1'")
    assert_problem(await push(gateway, config, status_update("T1", "working", "x")), 404)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"",
        b"null",
        b"[]",
        {"hello": "world"},
        {"task": {"id": "T1"}},
        status_update("T2", "completed", "someone else's"),
        {"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}}},
    ],
    ids=[
        "not-json",
        "empty",
        "null",
        "array",
        "not-a-task",
        "no-status",
        "another-task",
        "no-task-id",
    ],
)
async def test_a_push_that_is_not_a_task_of_its_config_is_422_and_writes_nothing(
    gateway: Client, fake_agent: StartFake, body: Any
) -> None:
    agent, config = await working_task(gateway, fake_agent)
    before = await scrape(gateway)
    r = await push(gateway, config, body)
    assert_problem(r, 422)
    after = await scrape(gateway)
    assert moved(before, after, "a2ac_push_in_total", outcome="invalid") == 1
    assert [e["type"] for e in await events(gateway, agent, "T1")] == ["task_created"]


async def test_a_push_past_the_size_bound_is_413_and_the_agent_receives_it(
    gateway: Client, fake_agent: StartFake
) -> None:
    agent, config = await working_task(gateway, fake_agent)
    big = status_update("T1", "working", "x" * (2 * LIMIT))
    headers = {"X-A2A-Notification-Token": config["token"]}
    url = f"{gateway.base}/v1/a2a/push-in/{config['id']}"
    # As an a2a-sdk agent sends it (httpx): the status arrives, not a reset connection.
    async with httpx.AsyncClient() as agent_side:
        r = await agent_side.post(url, json=big, headers=headers)
        assert r.status_code == 413
        r = await agent_side.post(url, content=b"y" * (40 * LIMIT), headers=headers)
        assert r.status_code == 413
    assert [e["type"] for e in await events(gateway, agent, "T1")] == ["task_created"]


async def test_a_push_before_the_send_is_answered_binds_the_config(
    gateway: Client, fake_agent: StartFake, db: asyncpg.Connection
) -> None:
    # The agent pushes while it has not answered yet: the config is bound to the task the
    # push names, whose row the send's answer then stores.
    pushed: list[int] = []

    async def handler(request: JSON) -> JSON:
        config = request["params"]["configuration"]["taskPushNotificationConfig"]
        r = await push(gateway, config, status_update("T9", "working", "early"))
        pushed.append(r.status)
        r = await push(gateway, config, status_update("T8", "working", "other"))
        pushed.append(r.status)
        return rpc_result(request, task_v10("T9", "working"))

    agent = await register_fake(gateway, fake_agent, handler, capabilities=PUSHES)
    body = {"text": "go", "configuration": {"returnImmediately": True}}
    r = await gateway.call("POST", f"/v1/a2a/{agent.id}/messages", body)
    assert r.status == 200, r.raw
    assert pushed == [204, 422]
    config = agent.received[0]["params"]["configuration"]["taskPushNotificationConfig"]
    bound = await eventually(
        lambda: db.fetchval(
            "SELECT task IS NOT NULL AND task_id = 'T9' FROM a2a_push_in WHERE id = $1::uuid",
            config["id"],
        ),
        "the config bound to T9",
    )
    assert bound


async def test_a_start_answered_with_a_terminal_task_has_its_config_deleted_at_the_agent(
    gateway: Client, fake_agent: StartFake, db: asyncpg.Connection
) -> None:
    async def handler(request: JSON) -> JSON:
        return rpc_result(request, task_v10("T1", "completed"))

    agent = await register_fake(gateway, fake_agent, handler, capabilities=PUSHES)
    body = {"text": "go", "configuration": {"returnImmediately": True}}
    r = await gateway.call("POST", f"/v1/a2a/{agent.id}/messages", body)
    assert r.status == 200, r.raw
    config = agent.received[0]["params"]["configuration"]["taskPushNotificationConfig"]

    def deleted() -> JSON | None:
        asked = [q for q in agent.received if q["method"] == "DeleteTaskPushNotificationConfig"]
        return asked[0]["params"] if asked else None

    assert await eventually(deleted, "the config deleted") == {"taskId": "T1", "id": config["id"]}
    assert_problem(await push(gateway, config, status_update("T1", "working", "late")), 404)
