"""One status, one time (facade/stored): every façade answer that shows a task's status shows
the time the gateway stored for it, whichever method answers and whatever the agent said."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import asyncpg
import msgspec
import pytest

from a2a_continue.facade.translate import timestamp
from tests.support.client import Client, register
from tests.support.facade_clients import rpc
from tests.support.rpc import message_v03, message_v10
from tests.support.sdk_agent import SdkAgent, run_sdk_agent
from tests.support.sse_client import events

JSON = dict[str, Any]
SEND = {"1.0": "SendMessage", "0.3": "message/send"}
GET = {"1.0": "GetTask", "0.3": "tasks/get"}
SUBSCRIBE = {"1.0": "SubscribeToTask", "0.3": "tasks/resubscribe"}
MESSAGE = {"1.0": message_v10, "0.3": message_v03}


def task_in(result: JSON) -> JSON:
    task: JSON = result.get("task", result)
    return task


async def call(client: Client, agent_id: str, method: str, params: JSON, version: str) -> JSON:
    r = await rpc(client, agent_id, method, params, version=version)
    assert r.status == 200 and "error" not in r.json(), r.raw
    result: JSON = r.json()["result"]
    return result


async def first_subscribed(client: Client, agent_id: str, task_id: str, version: str) -> JSON:
    """The first frame of a subscription (the stored task), then the subscription is closed."""
    body = {"jsonrpc": "2.0", "id": 1, "method": SUBSCRIBE[version], "params": {"id": task_id}}
    headers = {"Authorization": f"Bearer {client.bearer}", "A2A-Version": version}
    url = f"{client.base}/a2a/{agent_id}"
    async with client.session.post(url, json=body, headers=headers) as subscription:
        assert subscription.status == 200
        async with asyncio.timeout(20):
            frame: JSON = (await anext(events(subscription))).json()
    return task_in(frame["result"])


async def stored_time(db: asyncpg.Connection, task_id: str) -> str:
    at: dt.datetime = await db.fetchval(
        "SELECT status_at FROM a2a_tasks WHERE task_id = $1", task_id
    )
    return timestamp(at)


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_one_status_has_one_timestamp_across_send_get_list_and_subscribe(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent, version: str
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    sent = task_in(await call(client, agent_id, SEND[version], MESSAGE[version]("hi"), version))
    task_id = sent["id"]

    got = await call(client, agent_id, GET[version], {"id": task_id}, version)
    subscribed = await first_subscribed(client, agent_id, task_id, version)
    listed = await call(client, agent_id, "ListTasks", {}, "1.0")

    times = {
        "send": sent["status"]["timestamp"],
        "get": got["status"]["timestamp"],
        "subscribe": subscribed["status"]["timestamp"],
        "list": listed["tasks"][0]["status"]["timestamp"],
    }
    assert set(times.values()) == {await stored_time(db, task_id)}, times


async def test_a_new_status_gets_a_new_time_which_every_method_shows(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    first = task_in(await call(client, agent_id, "SendMessage", message_v10("hi"), "1.0"))
    task_id = first["id"]
    unchanged = await call(client, agent_id, "GetTask", {"id": task_id}, "1.0")

    answered = await call(client, agent_id, "SendMessage", message_v10("Paris", task_id), "1.0")
    got = await call(client, agent_id, "GetTask", {"id": task_id}, "1.0")

    assert task_in(unchanged)["status"]["timestamp"] == first["status"]["timestamp"]
    now = task_in(answered)["status"]["timestamp"]
    assert now != first["status"]["timestamp"]
    assert task_in(got)["status"]["timestamp"] == now == await stored_time(db, task_id)


def sse_results(raw: bytes) -> list[JSON]:
    """The JSON-RPC results of an SSE body, in order."""
    results = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in block.splitlines() if line.startswith("data:")]
        if data:
            results.append(msgspec.json.decode("\n".join(data))["result"])
    return results


async def test_a_streamed_start_shows_the_stored_time_of_the_status_it_reports(
    client: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent(streaming=True) as sdk:
        agent_id = await register(client, sdk.url, "1.0", capabilities={"streaming": True})
        r = await rpc(client, agent_id, "SendStreamingMessage", message_v10("hi"), version="1.0")
        assert r.status == 200, r.raw
        statuses = [
            result.get("statusUpdate") or result["task"]
            for result in sse_results(r.raw)
            if "statusUpdate" in result or "task" in result
        ]
        last = statuses[-1]
        task_id = last.get("taskId") or last["id"]
        subscribed = await first_subscribed(client, agent_id, task_id, "1.0")

    assert last["status"]["timestamp"] == subscribed["status"]["timestamp"]
    assert last["status"]["timestamp"] == await stored_time(db, task_id)


@pytest.mark.parametrize("method", ["SendMessage", "CancelTask"])
async def test_a_retried_call_shows_the_time_its_first_answer_showed(
    client: Client, sdk: SdkAgent, method: str
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    params = message_v10("hi")
    first = task_in(await call(client, agent_id, "SendMessage", params, "1.0"))
    if method == "CancelTask":
        params = {"id": first["id"]}
        headers = {"A2A-Version": "1.0", "Idempotency-Key": "cancel-once"}
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answers = [
            await client.call("POST", f"/a2a/{agent_id}", body, headers=headers) for _ in "ab"
        ]
        first, again = (task_in(a.json()["result"]) for a in answers)
        assert answers[1].headers["Idempotent-Replayed"] == "true"
    else:
        r = await rpc(client, agent_id, method, params, version="1.0")
        assert r.headers["Idempotent-Replayed"] == "true"
        again = task_in(r.json()["result"])

    assert again["status"] == first["status"]
    got = await call(client, agent_id, "GetTask", {"id": first["id"]}, "1.0")
    assert got["status"]["timestamp"] == first["status"]["timestamp"]
