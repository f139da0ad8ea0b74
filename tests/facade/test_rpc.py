"""JSON-RPC at the gateway: the envelope, versions, translation, reads, and who may call what."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.support.client import Client, register, token
from tests.support.facade_clients import rpc
from tests.support.fakes import FakeAgent
from tests.support.rpc import message_v03, message_v10
from tests.support.rpc import rpc as direct_rpc
from tests.support.sdk_agent import SdkAgent

JSON = dict[str, Any]


async def test_numeric_id_is_echoed_exactly(client: Client, sdk: SdkAgent) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    r = await rpc(client, agent_id, "SendMessage", message_v10("weather?"), version="1.0", rpc_id=7)
    assert (r.status, r.json()["id"]) == (200, 7)
    assert b'"id":7,' in r.raw or b'"id":7}' in r.raw


async def test_id_is_echoed_on_errors_too(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await rpc(client, agent_id, "tasks/get", {"id": "nope"}, rpc_id=42)
    assert (r.status, r.json()["id"], r.json()["error"]["code"]) == (200, 42, -32001)
    r = await rpc(client, agent_id, "GetTask", {"id": "nope"}, version="1.0", rpc_id="abc")
    assert (r.status, r.json()["id"], r.json()["error"]["code"]) == (200, "abc", -32001)


async def test_body_that_is_not_json_is_a_parse_error_with_null_id(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await client.call("POST", f"/a2a/{agent_id}", data=b"{nope")
    assert r.status == 200
    assert (r.json()["id"], r.json()["error"]["code"]) == (None, -32700)


@pytest.mark.parametrize(
    "body",
    [
        [{"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}],
        {"id": 1, "method": "tasks/get", "params": {"id": "x"}},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": {"no": 1}, "method": "tasks/get"},
    ],
)
async def test_malformed_request_is_an_invalid_request(client: Client, body: Any) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await client.call("POST", f"/a2a/{agent_id}", body)
    assert (r.status, r.json()["error"]["code"]) == (200, -32600)


async def test_params_that_are_not_an_object_are_invalid_params(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await rpc(client, agent_id, "tasks/get", ["x"], rpc_id=3)
    assert (r.json()["id"], r.json()["error"]["code"]) == (3, -32602)


async def test_unknown_method_is_method_not_found(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await rpc(client, agent_id, "tasks/list", {}, rpc_id=1)
    assert r.json()["error"]["code"] == -32601


@pytest.mark.parametrize("where", ["header", "query"])
async def test_unsupported_protocol_version_is_refused(client: Client, where: str) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    if where == "header":
        r = await client.call("POST", f"/a2a/{agent_id}", body, headers={"A2A-Version": "2.0"})
    else:
        r = await client.call("POST", f"/a2a/{agent_id}?A2A-Version=0.2", body)
    assert (r.status, r.json()["error"]["code"]) == (200, -32009)


async def test_version_given_as_query_parameter_is_accepted(client: Client, sdk: SdkAgent) -> None:
    agent_id = await register(client, sdk.url, "0.3")
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": message_v10("hi")}
    r = await client.call("POST", f"/a2a/{agent_id}?A2A-Version=1.0", body)
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_raw_0_3_client_completes_a_task_with_a_1_0_agent(
    client: Client, sdk: SdkAgent
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    first = (await rpc(client, agent_id, "message/send", message_v03("weather?"), rpc_id=1)).json()
    task = first["result"]
    assert (task["kind"], task["status"]["state"]) == ("task", "input-required")
    status_message = task["status"]["message"]
    assert (status_message["kind"], status_message["role"]) == ("message", "agent")
    assert status_message["parts"] == [{"kind": "text", "text": "Which city?"}]

    done = await rpc(client, agent_id, "message/send", message_v03("Oslo", task["id"]), rpc_id=2)
    result = done.json()["result"]
    assert (result["kind"], result["status"]["state"]) == ("task", "completed")
    assert result["artifacts"][0]["parts"] == [{"kind": "text", "text": "Sunny in Oslo"}]
    assert [b["method"] for b in sdk.received] == ["SendMessage", "SendMessage"]

    got = (await rpc(client, agent_id, "tasks/get", {"id": task["id"]}, rpc_id=3)).json()
    assert (got["result"]["kind"], got["result"]["status"]["state"]) == ("task", "completed")


async def test_raw_1_0_client_completes_a_task_with_a_0_3_agent(
    client: Client, sdk: SdkAgent
) -> None:
    agent_id = await register(client, sdk.url, "0.3")
    first = await rpc(client, agent_id, "SendMessage", message_v10("weather?"), version="1.0")
    task = first.json()["result"]["task"]
    assert "kind" not in task
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    assert task["status"]["message"]["parts"] == [{"text": "Which city?"}]

    follow = message_v10("Lima", task["id"])
    done = await rpc(client, agent_id, "SendMessage", follow, version="1.0")
    result = done.json()["result"]["task"]
    assert result["status"]["state"] == "TASK_STATE_COMPLETED"
    assert result["artifacts"][0]["parts"] == [{"text": "Sunny in Lima"}]
    assert [b["method"] for b in sdk.received] == ["message/send", "message/send"]
    sent = sdk.received[1]["params"]["message"]
    assert (sent["kind"], sent["role"], sent["taskId"]) == ("message", "user", task["id"])
    assert sent["parts"] == [{"kind": "text", "text": "Lima"}]


async def test_message_answer_is_wrapped_for_1_0_and_bare_for_0_3(
    client: Client, fake_agent: Any
) -> None:
    async def answer(body: JSON) -> JSON:
        reply = {
            "kind": "message",
            "messageId": "m1",
            "role": "agent",
            "parts": [{"kind": "text", "text": "hi"}],
        }
        return {"jsonrpc": "2.0", "id": body["id"], "result": reply}

    agent: FakeAgent = await fake_agent(answer)
    agent_id = await register(client, agent.url, "0.3")
    v10 = (await rpc(client, agent_id, "SendMessage", message_v10("hello"), version="1.0")).json()
    assert v10["result"] == {
        "message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}
    }
    v03 = (await rpc(client, agent_id, "message/send", message_v03("hello"))).json()
    assert v03["result"]["kind"] == "message" and v03["result"]["role"] == "agent"
    tasks = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks")).json()
    assert tasks["tasks"] == []


async def test_get_task_asks_the_agent_and_records_what_changed(
    client: Client, sdk: SdkAgent
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    first = await rpc(client, agent_id, "SendMessage", message_v10("weather?"), version="1.0")
    task_id = first.json()["result"]["task"]["id"]
    # Canceled behind the gateway's back: the agent knows, the store does not yet.
    async with aiohttp.ClientSession() as http:
        await direct_rpc(http, sdk.url, "CancelTask", {"id": task_id})
    got = await rpc(client, agent_id, "GetTask", {"id": task_id}, version="1.0")
    assert got.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert sdk.received[-1]["method"] == "GetTask"
    stored = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}")).json()
    assert stored["state"] == "canceled"
    events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/events")).json()
    last = events["events"][-1]
    assert (last["type"], last["previousState"], last["newState"]) == (
        "task_updated",
        "input-required",
        "canceled",
    )
    assert last["data"]["source"] == "refresh"


async def test_get_task_that_changed_nothing_appends_no_event(
    client: Client, sdk: SdkAgent
) -> None:
    agent_id = await register(client, sdk.url, "0.3")
    first = await rpc(client, agent_id, "message/send", message_v03("weather?"))
    task_id = first.json()["result"]["id"]
    await rpc(client, agent_id, "tasks/get", {"id": task_id})
    events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/events")).json()
    assert [e["type"] for e in events["events"]] == ["task_created"]


async def test_get_task_honours_history_length(client: Client, sdk: SdkAgent) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    first = await rpc(client, agent_id, "SendMessage", message_v10("weather?"), version="1.0")
    task_id = first.json()["result"]["task"]["id"]
    full = (await rpc(client, agent_id, "GetTask", {"id": task_id}, version="1.0")).json()
    assert len(full["result"]["history"]) >= 1
    short = await rpc(
        client, agent_id, "GetTask", {"id": task_id, "historyLength": 0}, version="1.0"
    )
    assert short.json()["result"].get("history", []) == []


async def test_list_tasks_filters_by_status_and_context(client: Client, sdk: SdkAgent) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    waiting = await rpc(client, agent_id, "SendMessage", message_v10("weather?"), version="1.0")
    done = await rpc(client, agent_id, "SendMessage", message_v10("now"), version="1.0")
    waiting_task = waiting.json()["result"]["task"]
    done_id = done.json()["result"]["task"]["id"]

    by_status = await rpc(
        client, agent_id, "ListTasks", {"status": "TASK_STATE_COMPLETED"}, version="1.0"
    )
    assert [t["id"] for t in by_status.json()["result"]["tasks"]] == [done_id]
    by_context = await rpc(
        client, agent_id, "ListTasks", {"contextId": waiting_task["contextId"]}, version="1.0"
    )
    listed = by_context.json()["result"]
    assert [t["id"] for t in listed["tasks"]] == [waiting_task["id"]]
    assert listed["tasks"][0]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert (listed["totalSize"], listed["pageSize"], listed["nextPageToken"]) == (1, 50, "")


async def test_list_tasks_is_a_1_0_method(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await rpc(client, agent_id, "ListTasks", {}, version="1.0")
    assert r.json()["result"]["tasks"] == []


@pytest.mark.parametrize(
    ("method", "version"),
    [
        ("CreateTaskPushNotificationConfig", "1.0"),
        ("GetTaskPushNotificationConfig", "1.0"),
        ("ListTaskPushNotificationConfigs", "1.0"),
        ("DeleteTaskPushNotificationConfig", "1.0"),
        ("tasks/pushNotificationConfig/set", "0.3"),
        ("tasks/pushNotificationConfig/get", "0.3"),
        ("tasks/pushNotificationConfig/list", "0.3"),
        ("tasks/pushNotificationConfig/delete", "0.3"),
    ],
)
async def test_push_notification_methods_on_an_unknown_task_are_task_not_found(
    client: Client, method: str, version: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    params = {
        "taskId": "t",
        "id": "t" if version == "0.3" else "c",
        "pushNotificationConfigId": "c",
        "url": "http://127.0.0.1:9/hook",
        "pushNotificationConfig": {"url": "http://127.0.0.1:9/hook"},
    }
    r = await rpc(client, agent_id, method, params, version=version, rpc_id=9)
    assert (r.status, r.json()["id"], r.json()["error"]["code"]) == (200, 9, -32001)


# ---- who may call what -------------------------------------------------------------------


async def test_no_token_is_401(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await rpc(client, agent_id, "tasks/get", {"id": "x"}, bearer=None)
    assert r.status == 401
    r = await rpc(client, agent_id, "tasks/get", {"id": "x"}, bearer="not-a-jwt")
    assert r.status == 401


@pytest.mark.parametrize(
    ("method", "params", "needs"),
    [
        ("message/send", message_v03("hi"), "a2a.invoke"),
        ("SendMessage", message_v10("hi"), "a2a.invoke"),
        ("tasks/cancel", {"id": "t"}, "a2a.invoke"),
        ("CancelTask", {"id": "t"}, "a2a.invoke"),
        ("tasks/get", {"id": "t"}, "a2a.read"),
        ("GetTask", {"id": "t"}, "a2a.read"),
        ("ListTasks", {}, "a2a.read"),
    ],
)
async def test_method_without_its_permission_is_403(
    client: Client, method: str, params: JSON, needs: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0", visibility="public")
    other = "a2a.read" if needs == "a2a.invoke" else "a2a.invoke"
    r = await rpc(client, agent_id, method, params, bearer=token(perms=[other]))
    assert (r.status, r.headers["content-type"]) == (403, "application/problem+json")
    assert needs in r.json()["detail"]


async def test_method_with_its_permission_is_answered(client: Client, sdk: SdkAgent) -> None:
    agent_id = await register(client, sdk.url, "1.0", visibility="public")
    sender = token("bob@example.com", perms=["a2a.invoke"])
    reader = token("bob@example.com", perms=["a2a.read"])
    sent = await rpc(client, agent_id, "message/send", message_v03("weather?"), bearer=sender)
    task_id = sent.json()["result"]["id"]
    got = await rpc(client, agent_id, "tasks/get", {"id": task_id}, bearer=reader)
    assert got.json()["result"]["id"] == task_id


async def test_other_callers_tasks_are_not_found(client: Client, sdk: SdkAgent) -> None:
    agent_id = await register(client, sdk.url, "1.0", visibility="public")
    sent = await rpc(client, agent_id, "message/send", message_v03("weather?"))
    task_id = sent.json()["result"]["id"]
    bob = token("bob@example.com")
    for method, params in [
        ("tasks/get", {"id": task_id}),
        ("tasks/cancel", {"id": task_id}),
        ("message/send", message_v03("Paris", task_id)),
    ]:
        r = await rpc(client, agent_id, method, params, bearer=bob)
        assert r.json()["error"]["code"] == -32001, method
    listed = await rpc(client, agent_id, "ListTasks", {}, version="1.0", bearer=bob)
    assert listed.json()["result"]["tasks"] == []


async def test_invisible_agent_answers_task_not_found(
    client: Client, db: asyncpg.Connection
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    bob = token("bob@example.com")
    r = await rpc(client, agent_id, "message/send", message_v03("hi"), bearer=bob)
    assert (r.status, r.json()["error"]["code"]) == (200, -32001)
    r = await rpc(client, str(uuid.uuid4()), "message/send", message_v03("hi"))
    assert (r.status, r.json()["error"]["code"]) == (200, -32001)


async def test_body_over_the_size_limit_is_an_invalid_request(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    huge = message_v03("x" * 70_000)
    r = await rpc(client, agent_id, "message/send", huge, rpc_id=1)
    assert r.status == 200
    error = r.json()["error"]
    assert (r.json()["id"], error["code"], error["data"]["status"]) == (None, -32600, 413)


async def test_patch_level_version_header_is_accepted(client: Client, sdk: SdkAgent) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    r = await rpc(client, agent_id, "SendMessage", message_v10("weather?"), version="1.0.0")
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_list_tasks_shows_artifacts_only_when_asked(client: Client, sdk: SdkAgent) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    await rpc(client, agent_id, "SendMessage", message_v10("now"), version="1.0")
    plain = await rpc(client, agent_id, "ListTasks", {}, version="1.0")
    assert "artifacts" not in plain.json()["result"]["tasks"][0]
    full = await rpc(client, agent_id, "ListTasks", {"includeArtifacts": True}, version="1.0")
    [task] = full.json()["result"]["tasks"]
    assert task["artifacts"][0]["parts"] == [{"text": "Sunny now"}]


async def test_list_tasks_refuses_a_filter_it_does_not_apply(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    params = {"statusTimestampAfter": "2026-01-01T00:00:00Z"}
    r = await rpc(client, agent_id, "ListTasks", params, version="1.0")
    assert r.json()["error"]["code"] == -32602
