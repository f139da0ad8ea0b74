"""Streaming through the façade: SSE frames in the client's version, carrying its id."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from a2a.types.a2a_pb2 import StreamResponse, SubscribeToTaskRequest, TaskState

from tests.support.client import Client, register, token
from tests.support.facade_clients import rpc, sdk_client, send_all, user_message
from tests.support.fakes import FakeAgent
from tests.support.rpc import message_v03, message_v10
from tests.support.sdk_agent import SdkAgent, run_sdk_agent
from tests.support.sse_client import events

JSON = dict[str, Any]


def sse_frames(raw: bytes) -> list[JSON]:
    """The JSON-RPC objects of an SSE body, in order."""
    frames = []
    for event in raw.decode().replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in event.splitlines() if line.startswith("data:")]
        if data:
            frames.append(msgspec.json.decode("\n".join(data)))
    return frames


async def stream(
    client: Client, agent_id: str, method: str, params: JSON, version: str | None, rpc_id: Any
) -> list[JSON]:
    r = await rpc(client, agent_id, method, params, version=version, rpc_id=rpc_id)
    assert r.status == 200, r.raw
    assert r.headers["content-type"].startswith("text/event-stream")
    return sse_frames(r.raw)


async def test_streamed_start_frames_carry_the_numeric_id_in_0_3_shape(
    client: Client, sdk: SdkAgent
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    frames = await stream(client, agent_id, "message/stream", message_v03("weather?"), None, 11)
    assert frames and all(f["id"] == 11 and f["jsonrpc"] == "2.0" for f in frames)
    kinds = [f["result"]["kind"] for f in frames]
    assert kinds.count("task") == 1
    states = [f["result"]["status"]["state"] for f in frames]
    assert states[-1] == "input-required"
    assert all("TASK_STATE" not in s for s in states)


async def test_streamed_follow_up_frames_are_1_0_shaped_for_a_1_0_client(
    client: Client, sdk: SdkAgent
) -> None:
    agent_id = await register(client, sdk.url, "0.3")
    first = await stream(
        client, agent_id, "SendStreamingMessage", message_v10("weather?"), "1.0", "s1"
    )
    task_id = next(f["result"]["task"]["id"] for f in first if "task" in f["result"])
    frames = await stream(
        client, agent_id, "SendStreamingMessage", message_v10("Quito", task_id), "1.0", "s2"
    )
    assert all(f["id"] == "s2" and "kind" not in f["result"] for f in frames)
    last = frames[-1]["result"]
    state = (last.get("task") or last.get("statusUpdate"))["status"]["state"]
    assert state == "TASK_STATE_COMPLETED"
    stored = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}")).json()
    assert stored["state"] == "completed"


async def test_stream_refused_before_it_starts_is_a_plain_json_rpc_error(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await rpc(client, agent_id, "message/stream", message_v03("hi", "no-such-task"), rpc_id=4)
    assert (r.status, r.headers["content-type"]) == (200, "application/json")
    assert (r.json()["id"], r.json()["error"]["code"]) == (4, -32001)


@pytest.mark.parametrize(
    ("method", "version"), [("SendStreamingMessage", "1.0"), ("message/stream", "0.3")]
)
async def test_streamed_start_in_the_context_of_another_callers_task_is_task_not_found(
    client: Client, streaming_sdk: SdkAgent, method: str, version: str
) -> None:
    agent_id = await register(
        client, streaming_sdk.url, "1.0", visibility="public", capabilities=STREAMING
    )
    frames = await stream(client, agent_id, method, message_v10("weather?"), version, 1)
    result = frames[0]["result"]
    context_id = result.get("task", result)["contextId"]
    params = message_v10("weather?") if version == "1.0" else message_v03("weather?")
    params["message"]["contextId"] = context_id
    calls = len(streaming_sdk.received)

    r = await rpc(client, agent_id, method, params, version=version, bearer=token("bob@x.org"))

    assert (r.status, r.headers["content-type"]) == (200, "application/json")
    assert r.json()["error"]["code"] == -32001
    assert len(streaming_sdk.received) == calls


async def test_stream_needs_the_invoke_permission(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0", visibility="public")
    r = await rpc(
        client, agent_id, "message/stream", message_v03("hi"), bearer=token(perms=["a2a.read"])
    )
    assert r.status == 403


# ---- against an agent that streams --------------------------------------------------------

STREAMING = {"streaming": True}
VERSIONS = [("1.0", "1.0"), ("1.0", "0.3"), ("0.3", "1.0"), ("0.3", "0.3")]


@pytest.fixture
async def streaming_sdk() -> AsyncIterator[SdkAgent]:
    async with run_sdk_agent(streaming=True) as agent:
        yield agent


def frame_state(frame: StreamResponse) -> int | None:
    if frame.HasField("task"):
        return int(frame.task.status.state)
    if frame.HasField("status_update"):
        return int(frame.status_update.status.state)
    return None


@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_sdk_client_streams_a_start_and_a_follow_up_from_a_streaming_agent(
    client: Client,
    gateway_url: str,
    streaming_sdk: SdkAgent,
    client_version: str,
    agent_version: str,
) -> None:
    agent_id = await register(client, streaming_sdk.url, agent_version, capabilities=STREAMING)
    async with sdk_client(gateway_url, agent_id, version=client_version, streaming=True) as a2a:
        first = await send_all(a2a, user_message("weather?"))
        task_id = next(f.task.id for f in first if f.HasField("task"))
        states = [s for s in map(frame_state, first) if s is not None]
        assert states[-1] == TaskState.TASK_STATE_INPUT_REQUIRED
        assert any(f.HasField("artifact_update") for f in first)

        second = await send_all(a2a, user_message("Paris", task_id))
        states = [s for s in map(frame_state, second) if s is not None]
        assert states[-1] == TaskState.TASK_STATE_COMPLETED
        texts = [
            p.text
            for f in second
            if f.HasField("artifact_update")
            for p in f.artifact_update.artifact.parts
        ]
        assert "Sunny in Paris" in texts

    method = "SendStreamingMessage" if agent_version == "1.0" else "message/stream"
    assert [b["method"] for b in streaming_sdk.received] == [method, method]
    stored = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}")).json()
    assert stored["state"] == "completed"
    assert {a["artifactId"] for a in stored["artifacts"]} == {"draft", "forecast"}
    events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}/events")).json()
    types = [e["type"] for e in events["events"]]
    assert types[0] == "task_created" and "task_continued" in types
    assert events["events"][-1]["newState"] == "completed"


@pytest.mark.parametrize("agent_version", ["1.0", "0.3"])
async def test_raw_0_3_stream_has_one_task_frame_and_final_on_its_last_status(
    client: Client, streaming_sdk: SdkAgent, agent_version: str
) -> None:
    agent_id = await register(client, streaming_sdk.url, agent_version, capabilities=STREAMING)
    first = await stream(client, agent_id, "message/stream", message_v03("weather?"), None, 21)
    task_id = first[0]["result"]["id"]
    follow = await stream(
        client, agent_id, "message/stream", message_v03("Bern", task_id), None, 22
    )
    for frames, rpc_id in ((first, 21), (follow, 22)):
        assert all(f["id"] == rpc_id for f in frames)
        results = [f["result"] for f in frames]
        assert [r["kind"] for r in results].count("task") <= 1
        statuses = [r for r in results if r["kind"] == "status-update"]
        assert all(isinstance(s["final"], bool) for s in statuses)
        assert statuses[-1]["final"] is True
        assert [s["final"] for s in statuses[:-1]] == [False] * (len(statuses) - 1)
    assert first[0]["result"]["kind"] == "task"
    assert follow[-1]["result"]["status"]["state"] == "completed"


async def test_raw_1_0_stream_frames_are_wrapped_and_carry_no_final(
    client: Client, streaming_sdk: SdkAgent
) -> None:
    agent_id = await register(client, streaming_sdk.url, "0.3", capabilities=STREAMING)
    frames = await stream(
        client, agent_id, "SendStreamingMessage", message_v10("weather?"), "1.0", 5
    )
    members = [next(iter(f["result"])) for f in frames]
    assert set(members) <= {"task", "message", "statusUpdate", "artifactUpdate"}
    updates = [f["result"]["statusUpdate"] for f in frames if "statusUpdate" in f["result"]]
    assert updates and all("final" not in u and "kind" not in u for u in updates)
    assert updates[-1]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


# ---- subscribe ----------------------------------------------------------------------------


@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_sdk_client_subscribes_and_sees_the_task_through_to_completion(
    client: Client, gateway_url: str, sdk: SdkAgent, client_version: str, agent_version: str
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    async with sdk_client(gateway_url, agent_id, version=client_version, streaming=True) as a2a:
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

    assert received[0].HasField("task")
    assert received[0].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [f.HasField("task") for f in received].count(True) == 1
    assert frame_state(received[-1]) == TaskState.TASK_STATE_COMPLETED
    artifacts = [f.artifact_update.artifact for f in received if f.HasField("artifact_update")]
    assert [a.parts[0].text for a in artifacts] == ["Sunny in Paris"]


async def test_subscription_stays_open_through_an_interrupted_state(
    client: Client, fake_agent: Any
) -> None:
    answers = iter(
        ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED"]
    )

    async def agent(body: JSON) -> JSON:
        task = {"id": "T", "contextId": "C", "status": {"state": next(answers)}}
        return {"jsonrpc": "2.0", "id": body["id"], "result": {"task": task}}

    fake: FakeAgent = await fake_agent(agent)
    agent_id = await register(client, fake.url, "1.0")
    await rpc(client, agent_id, "SendMessage", message_v10("go"), version="1.0")

    url = f"{client.base}/a2a/{agent_id}"
    body = {"jsonrpc": "2.0", "id": 8, "method": "tasks/resubscribe", "params": {"id": "T"}}
    headers = {"Authorization": f"Bearer {client.bearer}"}
    async with client.session.post(url, json=body, headers=headers) as subscription:
        assert subscription.status == 200
        received = events(subscription)
        async with asyncio.timeout(20):
            # The task's snapshot comes first: the subscription is open before the follow-ups.
            frames = [(await anext(received)).json()]
            for text in ("again", "done"):
                path = f"/v1/a2a/{agent_id}/tasks/T/messages"
                r = await client.call("POST", path, {"text": text})
                assert r.status == 200, r.raw
            frames += [event.json() async for event in received]
    results = [f["result"] for f in frames]
    assert results[0]["kind"] == "task"
    statuses = [(r["status"]["state"], r["final"]) for r in results if r["kind"] == "status-update"]
    assert statuses == [("input-required", False), ("completed", True)]


@pytest.mark.parametrize(
    ("method", "version"), [("SubscribeToTask", "1.0"), ("tasks/resubscribe", "0.3")]
)
async def test_subscribing_to_a_terminal_task_is_unsupported(
    client: Client, sdk: SdkAgent, method: str, version: str
) -> None:
    agent_id = await register(client, sdk.url, "1.0")
    done = await rpc(client, agent_id, "SendMessage", message_v10("now"), version="1.0")
    task_id = done.json()["result"]["task"]["id"]
    r = await rpc(client, agent_id, method, {"id": task_id}, version=version, rpc_id=3)
    assert (r.status, r.headers["content-type"]) == (200, "application/json")
    error = r.json()["error"]
    assert (r.json()["id"], error["code"]) == (3, -32004)
    state = error["data"]["state"] if version == "0.3" else error["data"][0]["metadata"]["state"]
    assert state == "completed"


@pytest.mark.parametrize(
    ("method", "version"), [("SubscribeToTask", "1.0"), ("tasks/resubscribe", "0.3")]
)
async def test_subscribing_to_an_unknown_task_is_task_not_found(
    client: Client, method: str, version: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await rpc(client, agent_id, method, {"id": "nope"}, version=version)
    assert r.json()["error"]["code"] == -32001


async def test_subscribe_needs_the_read_permission(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0", visibility="public")
    r = await rpc(
        client,
        agent_id,
        "SubscribeToTask",
        {"id": "t"},
        version="1.0",
        bearer=token(perms=["a2a.invoke"]),
    )
    assert r.status == 403
