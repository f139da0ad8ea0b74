"""The gateway's refusals as JSON-RPC errors, in the shape of the client's version (SPEC §9).

0.3 clients get the members (state, type, status) in an `error.data` object; 1.0 clients get
them as the metadata of one `google.rpc.ErrorInfo` entry in an `error.data` list.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from a2a.types.a2a_pb2 import GetTaskRequest
from a2a.utils.errors import TaskNotFoundError

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.client import Client, register
from tests.support.database import hold_claim
from tests.support.facade_clients import rpc, sdk_client
from tests.support.fakes import FakeAgent
from tests.support.ports import dead_url
from tests.support.rpc import message_v03, message_v10
from tests.support.sdk_agent import SdkAgent
from tests.support.servers import serve_asgi

JSON = dict[str, Any]
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
SEND = {"0.3": "message/send", "1.0": "SendMessage"}
GET = {"0.3": "tasks/get", "1.0": "GetTask"}
CANCEL = {"0.3": "tasks/cancel", "1.0": "CancelTask"}
BOTH = pytest.mark.parametrize("version", ["0.3", "1.0"])


def message(version: str, text: str, task_id: str | None = None) -> JSON:
    return message_v03(text, task_id) if version == "0.3" else message_v10(text, task_id)


def members(error: JSON, version: str) -> JSON:
    """Read the error's members, checking the shape its version prescribes."""
    data = error["data"]
    if version == "0.3":
        assert isinstance(data, dict)
        return data
    assert isinstance(data, list) and len(data) == 1
    info = data[0]
    assert (info["@type"], info["domain"]) == (ERROR_INFO, "a2a-protocol.org")
    assert isinstance(info["reason"], str) and info["reason"]
    assert all(isinstance(value, str) for value in info["metadata"].values())
    return {**info["metadata"], "reason": info["reason"]}


async def call(
    client: Client, agent_id: str, version: str, method: str, params: JSON, rpc_id: Any = 1
) -> JSON:
    r = await rpc(client, agent_id, method, params, version=version, rpc_id=rpc_id)
    assert r.status == 200, r.raw
    body: JSON = r.json()
    assert body["id"] == rpc_id and "result" not in body
    error: JSON = body["error"]
    return error


async def start(client: Client, agent_id: str, version: str, text: str) -> str:
    r = await rpc(client, agent_id, SEND[version], message(version, text), version=version)
    result = r.json()["result"]
    return str(result["id"] if version == "0.3" else result["task"]["id"])


@BOTH
async def test_unknown_task_is_task_not_found(client: Client, version: str) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    for method, params in [
        (GET[version], {"id": "no-such-task"}),
        (CANCEL[version], {"id": "no-such-task"}),
        (SEND[version], message(version, "hi", "no-such-task")),
    ]:
        error = await call(client, agent_id, version, method, params)
        assert error["code"] == -32001, method
        found = members(error, version)
        assert (found["type"], str(found["status"])) == ("not-found", "404")


@BOTH
async def test_follow_up_to_terminal_task_is_unsupported_or_invalid_params(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    task_id = await start(client, agent_id, version, "now")
    error = await call(client, agent_id, version, SEND[version], message(version, "more", task_id))
    assert error["code"] == (-32004 if version == "1.0" else -32602)
    found = members(error, version)
    assert (found["state"], found["type"]) == ("completed", "task-terminal")
    if version == "1.0":
        assert found["reason"] == "UNSUPPORTED_OPERATION"
    assert len(sdk.received) == 1


@BOTH
async def test_cancel_of_terminal_task_is_not_cancelable(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent_id = await register(client, sdk.url, "0.3")
    task_id = await start(client, agent_id, version, "fail")
    error = await call(client, agent_id, version, CANCEL[version], {"id": task_id})
    assert error["code"] == -32002
    found = members(error, version)
    assert (found["state"], found["type"]) == ("failed", "task-terminal")
    if version == "1.0":
        assert found["reason"] == "TASK_NOT_CANCELABLE"


@BOTH
async def test_cancel_the_agent_refuses_is_not_cancelable(
    client: Client, fake_agent: Any, db: asyncpg.Connection, version: str
) -> None:
    async def answer(body: JSON) -> JSON:
        if body["method"] == "SendMessage":
            task = {"id": "T1", "contextId": "C1", "status": {"state": "TASK_STATE_WORKING"}}
            return {"jsonrpc": "2.0", "id": body["id"], "result": {"task": task}}
        error = {"code": -32002, "message": "cannot stop now"}
        return {"jsonrpc": "2.0", "id": body["id"], "error": error}

    agent: FakeAgent = await fake_agent(answer)
    agent_id = await register(client, agent.url, "1.0")
    await start(client, agent_id, version, "go")
    error = await call(client, agent_id, version, CANCEL[version], {"id": "T1"})
    assert error["code"] == -32002
    assert members(error, version)["type"] == "task-not-cancelable"


@BOTH
async def test_follow_up_while_another_is_in_flight_is_internal_error_task_busy(
    client: Client, sdk: SdkAgent, db: asyncpg.Connection, version: str
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    task_id = await start(client, agent_id, version, "weather?")
    await hold_claim(db)
    error = await call(client, agent_id, version, SEND[version], message(version, "Rome", task_id))
    assert error["code"] == -32603
    found = members(error, version)
    assert (found["type"], str(found["status"])) == ("task-busy", "409")


@BOTH
async def test_invalid_send_params_are_invalid_params(client: Client, version: str) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    empty = message(version, "x")
    empty["message"]["parts"] = []
    for params in [{}, {"message": "hi"}, empty, message(version, "x") | {"configuration": 5}]:
        error = await call(client, agent_id, version, SEND[version], params)
        assert error["code"] == -32602, params
        assert members(error, version)["errors"]


@BOTH
async def test_client_task_and_context_rules_are_invalid_params(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    task_id = await start(client, agent_id, version, "weather?")
    params = message(version, "Rome", task_id)
    params["message"]["contextId"] = "someone-elses-context"
    error = await call(client, agent_id, version, SEND[version], params)
    assert error["code"] == -32602
    assert members(error, version)["type"] == "bad-request"
    params = message(version, "Rome", task_id)
    params["message"]["role"] = "agent"
    error = await call(client, agent_id, version, SEND[version], params)
    assert error["code"] == -32602


@BOTH
async def test_get_without_a_task_id_is_invalid_params(client: Client, version: str) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    for params in [{}, {"id": 5}, {"id": "t", "historyLength": -1}]:
        error = await call(client, agent_id, version, GET[version], params)
        assert error["code"] == -32602, params


@pytest.mark.parametrize("params", [{"pageSize": 0}, {"pageSize": 101}, {"pageSize": "ten"}])
async def test_page_size_outside_1_to_100_is_invalid_params(client: Client, params: JSON) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    error = await call(client, agent_id, "1.0", "ListTasks", params)
    assert error["code"] == -32602
    assert members(error, "1.0")["reason"] == "INVALID_PARAMS"


@pytest.mark.parametrize("params", [{"pageToken": "forged"}, {"status": "sleeping"}])
async def test_bad_page_token_or_status_is_invalid_params(client: Client, params: JSON) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    error = await call(client, agent_id, "1.0", "ListTasks", params)
    assert error["code"] == -32602


@BOTH
async def test_unreachable_agent_is_internal_error_with_status_502(
    client: Client, version: str
) -> None:
    agent_id = await register(client, dead_url(), "1.0")
    error = await call(client, agent_id, version, SEND[version], message(version, "hi"))
    assert error["code"] == -32603
    found = members(error, version)
    assert (found["type"], str(found["status"])) == ("agent-unreachable", "502")


@BOTH
async def test_follow_up_to_unreachable_agent_is_502_and_logged(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    task_id = await start(client, agent_id, version, "weather?")
    await client.call("PATCH", f"/v1/a2a/agents/{agent_id}", {"endpointUrl": dead_url()})
    error = await call(client, agent_id, version, SEND[version], message(version, "Rome", task_id))
    assert str(members(error, version)["status"]) == "502"
    events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/events")).json()
    assert [e["type"] for e in events["events"]] == ["task_created", "task_continue_failed"]


@BOTH
async def test_agent_timeout_is_internal_error_with_status_504(
    client: Client, fake_agent: Any, version: str
) -> None:
    async def slow(body: JSON) -> JSON:
        await asyncio.sleep(2)
        return {"jsonrpc": "2.0", "id": body["id"], "result": {}}

    agent: FakeAgent = await fake_agent(slow)
    agent_id = await register(client, agent.url, "1.0", timeoutSeconds=0.2)
    error = await call(client, agent_id, version, SEND[version], message(version, "hi"))
    assert error["code"] == -32603
    found = members(error, version)
    assert (found["type"], str(found["status"])) == ("agent-timeout", "504")


@pytest.fixture
async def gateway_without_database(settings: Settings) -> AsyncIterator[Client]:
    broken = msgspec.structs.replace(
        settings, database_url="postgresql://postgres@127.0.0.1:1/none"
    )
    async with serve_asgi(create_app(broken)) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


@BOTH
async def test_database_unavailable_is_internal_error_with_status_503(
    gateway_without_database: Client, version: str
) -> None:
    error = await call(
        gateway_without_database, str(uuid.uuid4()), version, SEND[version], message(version, "hi")
    )
    assert error["code"] == -32603
    found = members(error, version)
    assert (found["type"], str(found["status"])) == ("database-unavailable", "503")


@BOTH
async def test_agent_error_reaches_the_client_in_its_version(
    client: Client, fake_agent: Any, version: str
) -> None:
    async def refuse(body: JSON) -> JSON:
        info = {"@type": ERROR_INFO, "reason": "CONTENT_TYPE_NOT_SUPPORTED", "domain": "x"}
        error = {"code": -32005, "message": "no images", "data": [info | {"metadata": {"m": "1"}}]}
        return {"jsonrpc": "2.0", "id": body["id"], "error": error}

    agent: FakeAgent = await fake_agent(refuse)
    agent_id = await register(client, agent.url, "1.0")
    error = await call(client, agent_id, version, SEND[version], message(version, "hi"), rpc_id=5)
    assert (error["code"], error["message"]) == (-32005, "no images")
    assert members(error, version)["m"] == "1"


@BOTH
async def test_sdk_client_raises_task_not_found_for_an_unknown_task(
    client: Client, gateway_url: str, version: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    async with sdk_client(gateway_url, agent_id, version=version) as a2a:
        with pytest.raises(TaskNotFoundError):
            await a2a.get_task(GetTaskRequest(id="no-such-task"))
