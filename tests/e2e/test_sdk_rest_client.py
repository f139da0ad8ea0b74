"""The official a2a-sdk client on its HTTP+JSON transport (1.0, and its 0.3 compatibility
transport) works through the gateway as it would with the agent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from a2a.client.transports.rest import RestTransport
from a2a.compat.v0_3.rest_transport import CompatRestTransport
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from tests.support.client import Client, register, token
from tests.support.facade_clients import sdk_client, send_all, user_message
from tests.support.fakes import HeldAgent, StartFake
from tests.support.sdk_agent import SdkAgent, run_sdk_agent
from tests.support.waiting import eventually

VERSIONS = [("1.0", "1.0"), ("1.0", "0.3"), ("0.3", "1.0"), ("0.3", "0.3")]
REST = "HTTP+JSON"
TRANSPORTS = {"1.0": RestTransport, "0.3": CompatRestTransport}
JSON = dict[str, Any]


def state_of(frame: StreamResponse) -> int | None:
    if frame.HasField("task"):
        return int(frame.task.status.state)
    if frame.HasField("status_update"):
        return int(frame.status_update.status.state)
    return None


async def events_of(client: Client, agent_id: str, task_id: str) -> list[tuple[str, str]]:
    events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/events")).json()
    return [(e["type"], e["newState"]) for e in events["events"]]


@pytest.mark.parametrize("streaming", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_rest_client_asks_answers_and_completes_through_the_gateway(
    client: Client,
    gateway_url: str,
    sdk: SdkAgent,
    client_version: str,
    agent_version: str,
    streaming: bool,
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    async with sdk_client(
        gateway_url, agent_id, version=client_version, streaming=streaming, binding=REST
    ) as a2a:
        assert isinstance(a2a._transport, TRANSPORTS[client_version])  # type: ignore[attr-defined]
        first = await send_all(a2a, user_message("weather?"))
        assert state_of(first[-1]) == TaskState.TASK_STATE_INPUT_REQUIRED
        task = first[0].task
        assert task.status.message.parts[0].text == "Which city?" or streaming

        second = await send_all(a2a, user_message("Paris", task.id, task.context_id))
        assert state_of(second[-1]) == TaskState.TASK_STATE_COMPLETED

        got = await a2a.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        assert got.artifacts[0].parts[0].text == "Sunny in Paris"

    stored = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task.id}")).json()
    assert (stored["state"], stored["owner"]) == ("completed", "alice@example.com")
    assert await events_of(client, agent_id, task.id) == [
        ("task_created", "input-required"),
        ("task_continued", "completed"),
    ]


@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_rest_client_cancels_a_waiting_task_and_the_store_records_it(
    client: Client, gateway_url: str, sdk: SdkAgent, client_version: str, agent_version: str
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    async with sdk_client(gateway_url, agent_id, version=client_version, binding=REST) as a2a:
        [first] = await send_all(a2a, user_message("weather?"))
        canceled = await a2a.cancel_task(CancelTaskRequest(id=first.task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):  # refusal: a terminal task
            await a2a.cancel_task(CancelTaskRequest(id=first.task.id))
        with pytest.raises((UnsupportedOperationError, InvalidParamsError)):
            await send_all(a2a, user_message("Paris", first.task.id))
    assert await events_of(client, agent_id, first.task.id) == [
        ("task_created", "input-required"),
        ("task_canceled", "canceled"),
    ]


@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_rest_client_subscribes_and_sees_the_task_through_to_completion(
    client: Client, gateway_url: str, sdk: SdkAgent, client_version: str, agent_version: str
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    async with sdk_client(
        gateway_url, agent_id, version=client_version, streaming=True, binding=REST
    ) as a2a:
        [first] = await send_all(a2a, user_message("weather?"))
        task_id = first.task.id
        received: list[StreamResponse] = []
        opened = asyncio.Event()

        async def follow() -> None:
            async for frame in a2a.subscribe(SubscribeToTaskRequest(id=task_id)):
                received.append(frame)
                opened.set()

        watching = asyncio.create_task(follow())
        await asyncio.wait_for(opened.wait(), 10)
        r = await client.call(
            "POST", f"/v1/a2a/{agent_id}/tasks/{task_id}/messages", {"text": "Paris"}
        )
        assert r.status == 200, r.raw
        await asyncio.wait_for(watching, 10)
        with pytest.raises(UnsupportedOperationError):  # the task is terminal now
            async for _ in a2a.subscribe(SubscribeToTaskRequest(id=task_id)):
                pass

    assert received[0].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert state_of(received[-1]) == TaskState.TASK_STATE_COMPLETED
    artifacts = [f.artifact_update.artifact for f in received if f.HasField("artifact_update")]
    assert [a.parts[0].text for a in artifacts] == ["Sunny in Paris"]


async def test_rest_client_lists_only_its_own_tasks_page_by_page(
    client: Client, gateway_url: str, sdk: SdkAgent
) -> None:
    agent_id = await register(client, sdk.url, "1.0", visibility="public")
    async with sdk_client(gateway_url, agent_id, binding=REST) as a2a:
        mine = [(await send_all(a2a, user_message("weather?")))[0].task.id for _ in range(3)]
    async with sdk_client(
        gateway_url, agent_id, bearer=token("bob@example.com"), binding=REST
    ) as a2a:
        await send_all(a2a, user_message("weather?"))
    async with sdk_client(gateway_url, agent_id, binding=REST) as alice:
        first = await alice.list_tasks(ListTasksRequest(page_size=2))
        rest = await alice.list_tasks(
            ListTasksRequest(page_size=2, page_token=first.next_page_token)
        )
        with pytest.raises(InvalidParamsError):  # refusal: bad params
            await alice.list_tasks(ListTasksRequest(page_size=500))
    assert [t.id for t in first.tasks] + [t.id for t in rest.tasks] == mine[::-1]
    assert (first.total_size, first.page_size, rest.next_page_token) == (3, 2, "")


@pytest.mark.parametrize("client_version", ["1.0", "0.3"])
async def test_rest_client_cannot_see_another_callers_task(
    client: Client, gateway_url: str, sdk: SdkAgent, client_version: str
) -> None:
    agent_id = await register(client, sdk.url, "1.0", visibility="public")
    async with sdk_client(gateway_url, agent_id, version=client_version, binding=REST) as a2a:
        [first] = await send_all(a2a, user_message("weather?"))
    bob = token("bob@example.com")
    async with sdk_client(
        gateway_url, agent_id, version=client_version, bearer=bob, binding=REST
    ) as other:
        with pytest.raises(TaskNotFoundError):
            await other.get_task(GetTaskRequest(id=first.task.id))
        with pytest.raises(TaskNotFoundError):
            await other.cancel_task(CancelTaskRequest(id=first.task.id))
        with pytest.raises(TaskNotFoundError):
            await send_all(other, user_message("Paris", first.task.id))


@pytest.mark.parametrize("client_version", ["1.0", "0.3"])
async def test_rest_client_is_refused_a_follow_up_while_one_is_in_flight(
    client: Client, gateway_url: str, fake_agent: StartFake, client_version: str
) -> None:
    held = HeldAgent()
    agent = await fake_agent(held)
    agent_id = await register(client, agent.url, "1.0")
    async with sdk_client(gateway_url, agent_id, version=client_version, binding=REST) as a2a:
        [first] = await send_all(a2a, user_message("weather?"))
        path = f"/v1/a2a/{agent_id}/tasks/{first.task.id}/messages"
        in_flight = asyncio.create_task(client.call("POST", path, {"text": "Paris"}))
        await asyncio.wait_for(held.arrived.wait(), 10)
        with pytest.raises(A2AError) as refused:
            await send_all(a2a, user_message("Rome", first.task.id))
        assert isinstance(refused.value, InternalError)
        if client_version == "1.0":
            assert refused.value.data["type"] == "task-busy"  # type: ignore[index]
        held.release.set()
        assert (await in_flight).status == 200
    await eventually(lambda: held.follow_ups == 1)


def record_of(task: JSON, events: list[JSON]) -> tuple[Any, ...]:
    """What a flow leaves in the store, without what differs per task (ids, times)."""
    kept = {k: task[k] for k in ("state", "owner", "teamId", "lastSeq", "statusMessage")}
    if kept["statusMessage"] is not None:
        kept["statusMessage"] = {
            k: v
            for k, v in kept["statusMessage"].items()
            if k not in ("messageId", "taskId", "contextId")
        }
    artifacts = [a["parts"] for a in task["artifacts"]]
    shaped = [
        (e["seq"], e["type"], e["previousState"], e["newState"], e["actor"], sorted(e["data"]))
        for e in events
    ]
    return kept, artifacts, shaped


@pytest.mark.parametrize("streaming", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_rest_flow_leaves_the_same_rows_and_events_as_the_json_rpc_flow(
    client: Client,
    gateway_url: str,
    sdk: SdkAgent,
    client_version: str,
    agent_version: str,
    streaming: bool,
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    records = []
    for binding in ("JSONRPC", REST):
        async with sdk_client(
            gateway_url, agent_id, version=client_version, streaming=streaming, binding=binding
        ) as a2a:
            [first, *_] = await send_all(a2a, user_message("weather?"))
            task_id = first.task.id
            await send_all(a2a, user_message("Paris", task_id))
            [waiting, *_] = await send_all(a2a, user_message("weather?"))
            await a2a.cancel_task(CancelTaskRequest(id=waiting.task.id))
        for task_id in (first.task.id, waiting.task.id):
            task = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}")).json()
            events = await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/events")
            records.append((binding, record_of(task, events.json()["events"])))
    over_rpc = [r for b, r in records if b == "JSONRPC"]
    over_rest = [r for b, r in records if b == REST]
    assert over_rpc == over_rest
    assert [len(r[2]) for r in over_rest] == [2, 2]  # created + continued; created + canceled


@pytest.mark.parametrize("client_version", ["1.0", "0.3"])
@pytest.mark.parametrize("card_version", ["1.0", "0.3"])
async def test_rest_client_works_through_an_agent_registered_from_its_card(
    client: Client, gateway_url: str, client_version: str, card_version: str
) -> None:
    async with run_sdk_agent(card=card_version) as agent:
        r = await client.call("POST", "/v1/a2a/agents", {"cardUrl": agent.url})
        assert r.status == 201, r.raw
        agent_id = r.json()["id"]
        async with sdk_client(gateway_url, agent_id, version=client_version, binding=REST) as a2a:
            [first] = await send_all(a2a, user_message("weather?"))
            [second] = await send_all(a2a, user_message("Paris", first.task.id))
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert second.task.artifacts[0].parts[0].text == "Sunny in Paris"
