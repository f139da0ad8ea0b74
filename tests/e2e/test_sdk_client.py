"""The official a2a-sdk client, pointed at the gateway's card, works as if it spoke to the agent."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, ListTasksRequest, TaskState

from tests.support.client import Client, register, token
from tests.support.facade_clients import sdk_client, send_all, user_message
from tests.support.sdk_agent import SdkAgent

VERSIONS = [("1.0", "1.0"), ("1.0", "0.3"), ("0.3", "1.0"), ("0.3", "0.3")]


@pytest.mark.parametrize("streaming", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_sdk_client_asks_answers_and_completes_through_the_gateway(
    client: Client,
    gateway_url: str,
    sdk: SdkAgent,
    client_version: str,
    agent_version: str,
    streaming: bool,
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    async with sdk_client(
        gateway_url, agent_id, version=client_version, streaming=streaming
    ) as a2a:
        [first] = await send_all(a2a, user_message("weather?"))
        task = first.task
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert task.status.message.parts[0].text == "Which city?"

        [second] = await send_all(a2a, user_message("Paris", task.id, task.context_id))
        assert second.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert second.task.artifacts[0].parts[0].text == "Sunny in Paris"

        got = await a2a.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED

    stored = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task.id}")).json()
    assert (stored["state"], stored["owner"]) == ("completed", "alice@example.com")
    events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task.id}/events")).json()
    assert [(e["type"], e["newState"]) for e in events["events"]] == [
        ("task_created", "input-required"),
        ("task_continued", "completed"),
    ]


@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_sdk_client_cancels_a_waiting_task_and_the_store_records_it(
    client: Client, gateway_url: str, sdk: SdkAgent, client_version: str, agent_version: str
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    async with sdk_client(gateway_url, agent_id, version=client_version) as a2a:
        [first] = await send_all(a2a, user_message("weather?"))
        canceled = await a2a.cancel_task(CancelTaskRequest(id=first.task.id))
        assert (canceled.id, canceled.status.state) == (
            first.task.id,
            TaskState.TASK_STATE_CANCELED,
        )
    events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{first.task.id}/events")).json()
    assert [(e["type"], e["newState"]) for e in events["events"]] == [
        ("task_created", "input-required"),
        ("task_canceled", "canceled"),
    ]


async def test_sdk_client_lists_only_its_own_tasks_page_by_page(
    client: Client, gateway_url: str, sdk: SdkAgent
) -> None:
    agent_id = await register(client, sdk.url, "1.0", visibility="public")
    async with sdk_client(gateway_url, agent_id) as a2a:
        mine = [(await send_all(a2a, user_message("weather?")))[0].task.id for _ in range(3)]
    async with sdk_client(gateway_url, agent_id, bearer=token("bob@example.com")) as a2a:
        await send_all(a2a, user_message("weather?"))
        async with sdk_client(gateway_url, agent_id) as alice:
            first = await alice.list_tasks(ListTasksRequest(page_size=2))
            rest = await alice.list_tasks(
                ListTasksRequest(page_size=2, page_token=first.next_page_token)
            )
    assert [t.id for t in first.tasks] + [t.id for t in rest.tasks] == mine[::-1]
    assert (first.total_size, first.page_size, rest.next_page_token) == (3, 2, "")
    assert first.tasks[0].status.state == TaskState.TASK_STATE_INPUT_REQUIRED


@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_agent_receives_gateway_owned_message_ids_from_sdk_clients(
    client: Client, gateway_url: str, sdk: SdkAgent, client_version: str, agent_version: str
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    async with sdk_client(gateway_url, agent_id, version=client_version) as a2a:
        start = user_message("weather?")
        [first] = await send_all(a2a, start)
        follow = user_message("Rome", first.task.id)
        await send_all(a2a, follow)
    sent = [body["params"]["message"]["messageId"] for body in sdk.received]
    assert start.message.message_id not in sent and follow.message.message_id not in sent
    events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{first.task.id}/events")).json()
    assert [e["data"]["messageId"] for e in events["events"]] == sent
    assert [h["a2a-version"] for h in sdk.headers] == [agent_version, agent_version]


def shape_of(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (e["seq"], e["type"], e["previousState"], e["newState"], e["actor"], sorted(e["data"]))
        for e in events
    ]


@pytest.mark.parametrize("agent_version", ["1.0", "0.3"])
async def test_facade_flow_leaves_the_same_record_as_the_rest_flow(
    client: Client, gateway_url: str, sdk: SdkAgent, agent_version: str
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    r = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "weather?"})
    rest_id = (
        r.json()["result"]["task"]["id"] if agent_version == "1.0" else r.json()["result"]["id"]
    )
    await client.call("POST", f"/v1/a2a/{agent_id}/tasks/{rest_id}/messages", {"text": "Paris"})
    async with sdk_client(gateway_url, agent_id) as a2a:
        [first] = await send_all(a2a, user_message("weather?"))
        await send_all(a2a, user_message("Paris", first.task.id))

    records = []
    for task_id in (rest_id, first.task.id):
        task = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}")).json()
        events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/events")).json()
        kept = {k: task[k] for k in ("state", "owner", "teamId", "lastSeq", "statusMessage")}
        artifacts = [[p for p in a["parts"]] for a in task["artifacts"]]
        records.append((kept, artifacts, shape_of(events["events"])))
    assert records[0] == records[1]
