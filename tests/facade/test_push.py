"""Push notifications through the façade: the config methods of both versions, inline
configs on a send, and deliveries from each kind of agent (SPEC §12)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from a2a.types.a2a_pb2 import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    TaskPushNotificationConfig,
)

from a2a_continue.app import create_app
from a2a_continue.settings import Settings, parse_networks
from tests.support.client import Client, register, token
from tests.support.facade_clients import rpc, sdk_client
from tests.support.fakes import Scripted, StartFake, rpc_result, task_v10
from tests.support.push import deliveries, fast_push, start_task
from tests.support.receiver import Receiver, push_receiver
from tests.support.rpc import message_v03, message_v10
from tests.support.servers import serve_asgi
from tests.support.spellings import FULLWIDTH_LOOPBACK, REFUSED_SPELLINGS
from tests.support.waiting import eventually

JSON = dict[str, Any]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with push_receiver() as opened:
        yield opened


@pytest.fixture
async def push_client(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    app = create_app(fast_push(settings, watch_poll_base_s=0.1, watch_poll_max_s=0.2))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


async def agent_with_task(client: Client, fake_agent: StartFake) -> str:
    fake = await fake_agent(Scripted(start=lambda r: task_v10("T1", "input-required")))
    agent = await register(client, fake.url)
    await start_task(client, agent)
    return agent


def result(r: Any) -> Any:
    assert r.status == 200, r.raw
    body = r.json()
    assert "error" not in body, body
    return body["result"]


async def test_the_1_0_config_methods_create_get_list_and_delete(
    push_client: Client, fake_agent: StartFake
) -> None:
    agent = await agent_with_task(push_client, fake_agent)
    params = {"taskId": "T1", "id": "c1", "url": "http://127.0.0.1:9/hook", "token": "secret-t",
              "authentication": {"scheme": "Bearer"}}  # fmt: skip
    created = result(await rpc(push_client, agent, "CreateTaskPushNotificationConfig", params,
                               version="1.0"))  # fmt: skip
    expected = {"taskId": "T1", "id": "c1", "url": "http://127.0.0.1:9/hook",
                "authentication": {"scheme": "Bearer"}}  # fmt: skip
    assert created == expected
    got = await rpc(push_client, agent, "GetTaskPushNotificationConfig",
                    {"taskId": "T1", "id": "c1"}, version="1.0")  # fmt: skip
    assert result(got) == expected
    listed = await rpc(push_client, agent, "ListTaskPushNotificationConfigs", {"taskId": "T1"},
                       version="1.0")  # fmt: skip
    assert result(listed)["configs"] == [expected]
    rest = await push_client.call("GET", f"/v1/a2a/{agent}/tasks/T1/push-configs/c1")
    assert rest.json()["id"] == "c1" and b"secret" not in rest.raw
    for _ in range(2):  # idempotent
        deleted = await rpc(push_client, agent, "DeleteTaskPushNotificationConfig",
                            {"taskId": "T1", "id": "c1"}, version="1.0")  # fmt: skip
        assert result(deleted) == {}
    listed = await rpc(push_client, agent, "ListTaskPushNotificationConfigs", {"taskId": "T1"},
                       version="1.0")  # fmt: skip
    assert result(listed)["configs"] == []


async def test_the_0_3_config_methods_set_get_list_and_delete(
    push_client: Client, fake_agent: StartFake
) -> None:
    agent = await agent_with_task(push_client, fake_agent)
    inner = {"id": "c3", "url": "http://127.0.0.1:9/hook",
             "authentication": {"schemes": ["Bearer"]}}  # fmt: skip
    params = {"taskId": "T1", "pushNotificationConfig": inner}
    expected = {"taskId": "T1", "pushNotificationConfig": inner}
    set_ = await rpc(push_client, agent, "tasks/pushNotificationConfig/set", params)
    assert result(set_) == expected
    got = await rpc(push_client, agent, "tasks/pushNotificationConfig/get",
                    {"id": "T1", "pushNotificationConfigId": "c3"})  # fmt: skip
    assert result(got) == expected
    listed = await rpc(push_client, agent, "tasks/pushNotificationConfig/list", {"id": "T1"})
    assert result(listed) == [expected]
    rest = await push_client.call("GET", f"/v1/a2a/{agent}/tasks/T1/push-configs/c3")
    assert rest.json()["version"] == "0.3"
    deleted = await rpc(push_client, agent, "tasks/pushNotificationConfig/delete",
                        {"id": "T1", "pushNotificationConfigId": "c3"})  # fmt: skip
    assert result(deleted) is None


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_config_of_an_invisible_task_is_task_not_found(
    push_client: Client, fake_agent: StartFake, version: str
) -> None:
    agent = await agent_with_task(push_client, fake_agent)
    bob = push_client.as_(token("bob@example.com"))
    if version == "1.0":
        method, params = "CreateTaskPushNotificationConfig", {"taskId": "T1", "url": "http://a/"}
    else:
        method = "tasks/pushNotificationConfig/set"
        params = {"taskId": "T1", "pushNotificationConfig": {"url": "http://a/"}}
    r = await rpc(bob, agent, method, params, version=version)
    assert r.json()["error"]["code"] == -32001


async def test_a_link_local_webhook_is_invalid_params(
    push_client: Client, fake_agent: StartFake
) -> None:
    agent = await agent_with_task(push_client, fake_agent)
    params = {"taskId": "T1", "url": "http://169.254.169.254/hook"}
    r = await rpc(push_client, agent, "CreateTaskPushNotificationConfig", params, version="1.0")
    assert r.json()["error"]["code"] == -32602


@pytest.mark.parametrize("host", sorted(REFUSED_SPELLINGS))
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_webhook_spelling_a_refused_address_is_invalid_params(
    push_client: Client, fake_agent: StartFake, db: asyncpg.Connection, host: str, version: str
) -> None:
    agent = await agent_with_task(push_client, fake_agent)
    url = f"http://{host}:8080/hook"
    if version == "1.0":
        method, params = "CreateTaskPushNotificationConfig", {"taskId": "T1", "url": url}
    else:
        method = "tasks/pushNotificationConfig/set"
        params = {"taskId": "T1", "pushNotificationConfig": {"url": url}}
    error = (await rpc(push_client, agent, method, params, version=version)).json()["error"]
    assert error["code"] == -32602 and REFUSED_SPELLINGS[host] in error["message"]
    assert await db.fetchval("SELECT count(*) FROM a2a_push_configs") == 0


@pytest.mark.parametrize("host", sorted(REFUSED_SPELLINGS))
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_an_inline_webhook_spelling_a_refused_address_is_refused_before_the_agent_is_called(
    push_client: Client, fake_agent: StartFake, db: asyncpg.Connection, host: str, version: str
) -> None:
    fake = await fake_agent(Scripted(start=lambda r: task_v10("T1", "input-required")))
    agent = await register(push_client, fake.url)
    config = {"url": f"http://{host}:8080/hook"}
    if version == "1.0":
        method, params = "SendMessage", message_v10("weather?")
        params["configuration"] = {"taskPushNotificationConfig": config}
    else:
        method, params = "message/send", message_v03("weather?")
        params["configuration"] = {"pushNotificationConfig": config}
    error = (await rpc(push_client, agent, method, params, version=version)).json()["error"]
    assert error["code"] == -32602 and REFUSED_SPELLINGS[host] in error["message"]
    assert fake.received == []
    assert await db.fetchval("SELECT count(*) FROM a2a_push_configs") == 0


async def test_push_networks_judge_fullwidth_loopback_as_loopback_in_the_facade(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    elsewhere = fast_push(settings, push_networks=parse_networks("10.0.0.0/8"))
    async with serve_asgi(create_app(elsewhere)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        fake = await fake_agent(Scripted(start=lambda r: task_v10("T1", "input-required")))
        agent = await register(client, fake.url)
        params = message_v10("weather?")
        config = {"url": f"http://{FULLWIDTH_LOOPBACK}:9/hook"}
        params["configuration"] = {"taskPushNotificationConfig": config}
        inline = (await rpc(client, agent, "SendMessage", params, version="1.0")).json()
        await start_task(client, agent)
        params = {"taskId": "T1", **config}
        method = "CreateTaskPushNotificationConfig"
        created = (await rpc(client, agent, method, params, version="1.0")).json()
    for answer in (inline, created):
        assert answer["error"]["code"] == -32602
        assert "127.0.0.1 is outside A2AC_PUSH_NETWORKS" in answer["error"]["message"]
    assert len(fake.received) == 1  # the start the test made, not the refused inline one
    assert await db.fetchval("SELECT count(*) FROM a2a_push_configs") == 0


async def test_a_token_no_header_could_carry_is_invalid_params_before_the_agent_is_called(
    push_client: Client, fake_agent: StartFake
) -> None:
    fake = await fake_agent(Scripted(start=lambda r: task_v10("T1", "input-required")))
    agent = await register(push_client, fake.url)
    config = {"url": "http://127.0.0.1:9/hook", "token": "t\nX-Injected: 1"}
    params = message_v10("weather?")
    params["configuration"] = {"taskPushNotificationConfig": config}
    r = await rpc(push_client, agent, "SendMessage", params, version="1.0")
    assert r.json()["error"]["code"] == -32602
    assert fake.received == []
    await start_task(push_client, agent)
    params = {"taskId": "T1", **config}
    r = await rpc(push_client, agent, "CreateTaskPushNotificationConfig", params, version="1.0")
    assert r.json()["error"]["code"] == -32602


async def test_a_config_id_past_200_characters_is_invalid_params(
    push_client: Client, fake_agent: StartFake, db: asyncpg.Connection
) -> None:
    agent = await agent_with_task(push_client, fake_agent)
    params = {"taskId": "T1", "id": "c" * 201, "url": "http://127.0.0.1:9/hook"}
    r = await rpc(push_client, agent, "CreateTaskPushNotificationConfig", params, version="1.0")
    error = r.json()["error"]
    assert error["code"] == -32602 and error["message"].startswith("$.params.id:")
    assert await db.fetchval("SELECT count(*) FROM a2a_push_configs") == 0
    params["id"] = "c" * 200
    assert result(await rpc(push_client, agent, "CreateTaskPushNotificationConfig", params,
                            version="1.0"))["id"] == "c" * 200  # fmt: skip


async def test_an_inline_config_on_a_start_gets_the_task_first(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    fake = await fake_agent(Scripted(start=lambda r: task_v10("T1", "input-required")))
    agent = await register(push_client, fake.url)
    params = message_v10("weather?")
    params["configuration"] = {"taskPushNotificationConfig": {"url": receiver.url}}
    result(await rpc(push_client, agent, "SendMessage", params, version="1.0"))
    assert "taskPushNotificationConfig" not in str(fake.received)  # the agent never sees it
    (got,) = await eventually(lambda: receiver.ok() or None, "the first delivery")
    assert got.body["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_an_inline_0_3_config_on_a_follow_up_covers_its_changes(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    agent = await agent_with_task(push_client, fake_agent)
    params = message_v03("Paris", task_id="T1")
    params["message"]["contextId"] = "C1"
    params["configuration"] = {"pushNotificationConfig": {"url": receiver.url}}
    result(await rpc(push_client, agent, "message/send", params))
    (got,) = await eventually(lambda: receiver.ok() or None, "the follow-up's delivery")
    assert got.body["kind"] == "task" and got.body["status"]["state"] == "completed"


async def test_a_streamed_follow_up_produces_deliveries(
    push_client: Client, sse_agent: Any, receiver: Receiver
) -> None:
    frames = [
        {"statusUpdate": {"taskId": "T1", "contextId": "C1",
                          "status": {"state": "TASK_STATE_WORKING"}}},
        {"statusUpdate": {"taskId": "T1", "contextId": "C1",
                          "status": {"state": "TASK_STATE_COMPLETED"}}},
    ]  # fmt: skip

    async def script(request: JSON, send: Any) -> None:
        if "taskId" not in request["params"]["message"]:
            await send(msgspec.json.encode(rpc_result(request, task_v10("T1", "input-required"))))
            return
        for frame in frames:
            await send(msgspec.json.encode(rpc_result(request, frame)))

    agent_server = await sse_agent(script)
    agent = await register(push_client, agent_server.url, capabilities={"streaming": True})
    stream = {"Accept": "text/event-stream"}
    r = await push_client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "weather?"},
                               headers=stream)  # fmt: skip
    assert r.status == 200 and b"input" in r.raw.lower(), r.raw
    r = await push_client.call("POST", f"/v1/a2a/{agent}/tasks/T1/push-configs",
                               {"url": receiver.url})  # fmt: skip
    config = r.json()
    r = await push_client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "Paris"},
                               headers={"Accept": "text/event-stream"})  # fmt: skip
    assert r.status == 200
    await eventually(lambda: len(receiver.ok()) >= 2, "the stream's deliveries")
    states = [d.body.get("task", d.body.get("statusUpdate", {})).get("status", {}).get("state")
              for d in receiver.ok()]  # fmt: skip
    assert states[-1] == "TASK_STATE_COMPLETED"

    async def all_delivered() -> bool:
        rows = await deliveries(push_client, agent, "T1", config["id"])
        return all(row["state"] == "delivered" for row in rows)

    await eventually(all_delivered, "every delivery recorded as delivered")


async def test_a_watched_task_started_with_return_immediately_produces_deliveries(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    polls = {"n": 0}

    async def handler(request: JSON) -> Any:
        if request["method"] == "GetTask":
            polls["n"] += 1
            state = "working" if polls["n"] < 2 else "completed"
            return rpc_result(request, task_v10("T1", state)["task"])
        return rpc_result(request, task_v10("T1", "working"))

    fake = await fake_agent(handler)
    agent = await register(push_client, fake.url)
    params = message_v10("weather?")
    params["configuration"] = {"returnImmediately": True,
                               "taskPushNotificationConfig": {"url": receiver.url}}  # fmt: skip
    result(await rpc(push_client, agent, "SendMessage", params, version="1.0"))
    await eventually(
        lambda: any("TASK_STATE_COMPLETED" in d.raw.decode() for d in receiver.ok()),
        "the completion pushed",
    )
    assert receiver.ok()[0].body["task"]["status"]["state"] == "TASK_STATE_WORKING"


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_the_sdk_client_manages_configs_and_its_webhook_gets_the_changes(
    push_client: Client, fake_agent: StartFake, receiver: Receiver, version: str
) -> None:
    agent = await agent_with_task(push_client, fake_agent)
    async with sdk_client(push_client.base, agent, version=version) as sdk:
        created = await sdk.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id="T1", id="sdk-1", url=receiver.url, token="tk")
        )
        assert (created.id, created.url) == ("sdk-1", receiver.url)
        got = await sdk.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id="T1", id="sdk-1")
        )
        assert got.url == receiver.url and not got.token  # never returned
        listed = await sdk.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id="T1")
        )
        assert [c.id for c in listed.configs] == ["sdk-1"]
        r = await push_client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "x"})
        assert r.status == 200
        (got_push,) = await eventually(lambda: receiver.ok() or None, "the delivery")
        assert got_push.headers["X-A2A-Notification-Token"] == "tk"
        await sdk.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id="T1", id="sdk-1")
        )
    rest = await push_client.call("GET", f"/v1/a2a/{agent}/tasks/T1/push-configs")
    assert rest.json()["configs"] == []
