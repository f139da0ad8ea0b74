"""Push notifications over the façade's HTTP+JSON binding, in both versions: the config
routes on a real task, the configs REST sees, deliveries, and configs given on a send."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from a2a.types.a2a_pb2 import GetTaskPushNotificationConfigRequest, TaskPushNotificationConfig

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support import bindings as b
from tests.support.client import Client, Response, register, token
from tests.support.facade_clients import sdk_client
from tests.support.fakes import StartFake, WeatherFake
from tests.support.push import add_config, fast_push
from tests.support.receiver import Delivery, Receiver, push_receiver
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually

JSON = dict[str, Any]
VERSIONS = ["1.0", "0.3"]
_PREFIX = {"1.0": "", "0.3": "/v1"}


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with push_receiver() as opened:
        yield opened


@pytest.fixture
async def push_client(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    # A loopback webhook passes the address guard while A2AC_PUSH_NETWORKS is unset.
    app = create_app(fast_push(settings, watch_poll_base_s=0.1, watch_poll_max_s=0.2))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


def configs_path(agent_id: str, version: str, task_id: str, config_id: str | None = None) -> str:
    path = f"/a2a/{agent_id}{_PREFIX[version]}/tasks/{task_id}/pushNotificationConfigs"
    return path + (f"/{config_id}" if config_id else "")


async def started(client: Client, fake_agent: StartFake, version: str) -> tuple[str, str]:
    """An agent of ``version`` and a task it asked a question on, started over HTTP+JSON."""
    agent_id = await register(client, (await fake_agent(WeatherFake(version))).url, version)
    sent = await b.send(client, agent_id, b.REST, version, b.message(b.REST, version, "weather?"))
    task = b.result(sent, b.REST, version)["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return agent_id, str(task["id"])


def create_body(version: str, task_id: str, config_id: str, url: str) -> JSON:
    """A config as each version's HTTP+JSON client writes it (0.3: as a2a-sdk's REST
    transport sends a CreateTaskPushNotificationConfigRequest)."""
    if version == "1.0":
        return {"id": config_id, "url": url, "token": "secret-tk"}
    inner = {"id": config_id, "url": url, "token": "secret-tk"}
    name = f"tasks/{task_id}/pushNotificationConfigs/{config_id}"
    return {"parent": f"tasks/{task_id}", "config_id": config_id,
            "config": {"name": name, "push_notification_config": inner}}  # fmt: skip


def shown(version: str, task_id: str, config_id: str, url: str) -> JSON:
    """A config as the binding answers it (never its token)."""
    if version == "1.0":
        return {"taskId": task_id, "id": config_id, "url": url}
    return {"name": f"tasks/{task_id}/pushNotificationConfigs/{config_id}",
            "pushNotificationConfig": {"id": config_id, "url": url}}  # fmt: skip


async def create(
    client: Client, agent_id: str, version: str, task_id: str, config_id: str, url: str
) -> Response:
    body = create_body(version, task_id, config_id, url)
    return await client.call("POST", configs_path(agent_id, version, task_id), body)


def pushed_state(version: str, delivery: Delivery) -> str | None:
    """The task state a delivery carries (1.0: a StreamResponse; 0.3: the whole task)."""
    body = delivery.body
    if version == "1.0":
        frame = body.get("task") or body.get("statusUpdate") or {}
        state = frame.get("status", {}).get("state")
    else:
        assert body["kind"] == "task"
        state = body["status"]["state"]
    return None if state is None else str(state)


def completed(version: str, delivery: Delivery) -> bool:
    done = "TASK_STATE_COMPLETED" if version == "1.0" else "completed"
    return pushed_state(version, delivery) == done


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_config_created_over_http_json_is_got_and_listed_in_the_binding_shape(
    push_client: Client, fake_agent: StartFake, version: str
) -> None:
    agent_id, task_id = await started(push_client, fake_agent, version)
    url = "http://127.0.0.1:9/hook"
    expected = shown(version, task_id, "hook-1", url)
    made = await create(push_client, agent_id, version, task_id, "hook-1", url)
    assert b.result(made, b.REST, version) == expected
    got = await push_client.call("GET", configs_path(agent_id, version, task_id, "hook-1"))
    assert b.result(got, b.REST, version) == expected
    listed = await push_client.call("GET", configs_path(agent_id, version, task_id))
    assert b.result(listed, b.REST, version)["configs"] == [expected]
    assert not any(b"secret-tk" in r.raw for r in (made, got, listed))


@pytest.mark.parametrize("version", VERSIONS)
async def test_rest_and_the_binding_see_the_same_configs_under_one_id(
    push_client: Client, fake_agent: StartFake, version: str
) -> None:
    agent_id, task_id = await started(push_client, fake_agent, version)
    made = await create(push_client, agent_id, version, task_id, "hook-1", "http://127.0.0.1:9/a")
    assert made.status == 200, made.raw
    rest = await push_client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/push-configs")
    [config] = rest.json()["configs"]
    assert (config["id"], config["version"], config["hasToken"]) == ("hook-1", version, True)
    from_rest = await add_config(push_client, agent_id, task_id, url="http://127.0.0.1:9/b")
    listed = await push_client.call("GET", configs_path(agent_id, version, task_id))
    ids = {c["id"] if version == "1.0" else c["pushNotificationConfig"]["id"]
           for c in b.result(listed, b.REST, version)["configs"]}  # fmt: skip
    assert ids == {"hook-1", from_rest["id"]}


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_webhook_of_a_binding_config_gets_a_follow_ups_changes(
    push_client: Client, fake_agent: StartFake, receiver: Receiver, version: str
) -> None:
    agent_id, task_id = await started(push_client, fake_agent, version)
    made = await create(push_client, agent_id, version, task_id, "hook-1", receiver.url)
    assert made.status == 200, made.raw
    follow_up = b.message(b.REST, version, "Paris", task_id)
    answer = b.result(await b.send(push_client, agent_id, b.REST, version, follow_up), b.REST,
                      version)  # fmt: skip
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    got = await eventually(
        lambda: [d for d in receiver.ok() if completed(version, d)] or None, "the delivery"
    )
    assert got[0].headers["X-A2A-Notification-Token"] == "secret-tk"
    media = "application/a2a+json" if version == "1.0" else "application/json"
    assert got[0].headers["Content-Type"].startswith(media)


@pytest.mark.parametrize("version", VERSIONS)
async def test_deleting_a_config_over_http_json_is_idempotent_and_removes_it_everywhere(
    push_client: Client, fake_agent: StartFake, version: str
) -> None:
    agent_id, task_id = await started(push_client, fake_agent, version)
    made = await create(push_client, agent_id, version, task_id, "hook-1", "http://127.0.0.1:9/")
    assert made.status == 200, made.raw
    for _ in range(2):
        deleted = await push_client.call(
            "DELETE", configs_path(agent_id, version, task_id, "hook-1")
        )
        assert b.result(deleted, b.REST, version) == {}
    listed = await push_client.call("GET", configs_path(agent_id, version, task_id))
    assert b.result(listed, b.REST, version)["configs"] == []
    rest = await push_client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/push-configs")
    assert rest.json()["configs"] == []
    gone = await push_client.call("GET", configs_path(agent_id, version, task_id, "hook-1"))
    assert gone.status == 404, gone.raw


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_configs_of_another_callers_task_are_task_not_found(
    push_client: Client, fake_agent: StartFake, version: str
) -> None:
    agent_id, task_id = await started(push_client, fake_agent, version)
    made = await create(push_client, agent_id, version, task_id, "hook-1", "http://127.0.0.1:9/")
    assert made.status == 200, made.raw
    bob = push_client.as_(token("bob@example.com"))
    body = create_body(version, task_id, "hook-2", "http://127.0.0.1:9/")
    calls = [
        ("POST", configs_path(agent_id, version, task_id), body),
        ("GET", configs_path(agent_id, version, task_id), None),
        ("GET", configs_path(agent_id, version, task_id, "hook-1"), None),
        ("DELETE", configs_path(agent_id, version, task_id, "hook-1"), None),
    ]
    for method, path, json in calls:
        refused = b.refusal(await bob.call(method, path, json), b.REST, version)
        assert (refused.http_status, refused.code) == (404, -32001), (method, path)
    rest = await push_client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/push-configs")
    assert [c["id"] for c in rest.json()["configs"]] == ["hook-1"]  # nothing bob did stuck


@pytest.mark.parametrize(
    ("version", "name"),
    [
        ("1.0", "taskPushNotificationConfig"),
        ("0.3", "pushNotificationConfig"),
        ("0.3", "pushNotification"),
    ],
)
async def test_a_config_given_on_message_send_gets_the_tasks_changes(
    push_client: Client, fake_agent: StartFake, receiver: Receiver, version: str, name: str
) -> None:
    fake = await fake_agent(WeatherFake(version))
    agent_id = await register(push_client, fake.url, version)
    config = {"configuration": {name: {"url": receiver.url, "token": "inline-tk"}}}
    msg = b.message(b.REST, version, "weather?")
    task = b.result(await b.send(push_client, agent_id, b.REST, version, msg, **config), b.REST,
                    version)["task"]  # fmt: skip
    assert "inline-tk" not in str(fake.received)  # the agent never sees the webhook
    (first,) = await eventually(lambda: receiver.ok() or None, "the start's delivery")
    asked = "TASK_STATE_INPUT_REQUIRED" if version == "1.0" else "input-required"
    assert pushed_state(version, first) == asked  # the first delivery: the task as started
    assert first.headers["X-A2A-Notification-Token"] == "inline-tk"
    follow_up = b.message(b.REST, version, "Paris", task["id"])
    sent = await b.send(push_client, agent_id, b.REST, version, follow_up)
    assert sent.status == 200, sent.raw
    await eventually(
        lambda: any(completed(version, d) for d in receiver.ok()), "the follow-up's delivery"
    )
    rest = await push_client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task['id']}/push-configs")
    assert [c["version"] for c in rest.json()["configs"]] == [version]


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_sdk_rest_client_creates_and_gets_a_config(
    push_client: Client, fake_agent: StartFake, version: str
) -> None:
    agent_id, task_id = await started(push_client, fake_agent, version)
    url = "http://127.0.0.1:9/hook"
    async with sdk_client(push_client.base, agent_id, version=version, binding=b.REST) as sdk:
        made = await sdk.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="sdk-1", url=url, token="tk")
        )
        assert (made.task_id, made.id, made.url) == (task_id, "sdk-1", url)
        got = await sdk.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="sdk-1")
        )
        assert (got.task_id, got.id, got.url, got.token) == (task_id, "sdk-1", url, "")
