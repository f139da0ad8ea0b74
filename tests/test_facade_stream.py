"""Streaming through the façade: SSE frames in the client's version, carrying its id."""

from __future__ import annotations

from typing import Any

import msgspec

from tests.conftest import Client, register, token
from tests.facade_clients import rpc, v03_message, v10_message
from tests.sdk_agent import SdkAgent

JSON = dict[str, Any]


def sse_frames(raw: bytes) -> list[JSON]:
    """The JSON-RPC objects of an SSE body, in order."""
    frames = []
    for event in raw.decode().split("\n\n"):
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
    frames = await stream(client, agent_id, "message/stream", v03_message("weather?"), None, 11)
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
        client, agent_id, "SendStreamingMessage", v10_message("weather?"), "1.0", "s1"
    )
    task_id = next(f["result"]["task"]["id"] for f in first if "task" in f["result"])
    frames = await stream(
        client, agent_id, "SendStreamingMessage", v10_message("Quito", task_id), "1.0", "s2"
    )
    assert all(f["id"] == "s2" and "kind" not in f["result"] for f in frames)
    last = frames[-1]["result"]
    state = (last.get("task") or last.get("statusUpdate"))["status"]["state"]
    assert state == "TASK_STATE_COMPLETED"
    stored = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{task_id}")).json()
    assert stored["state"] == "completed"


async def test_stream_refused_before_it_starts_is_a_plain_json_rpc_error(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await rpc(client, agent_id, "message/stream", v03_message("hi", "no-such-task"), rpc_id=4)
    assert (r.status, r.headers["content-type"]) == (200, "application/json")
    assert (r.json()["id"], r.json()["error"]["code"]) == (4, -32001)


async def test_stream_needs_the_invoke_permission(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0", visibility="public")
    r = await rpc(
        client, agent_id, "message/stream", v03_message("hi"), bearer=token(perms=["a2a.read"])
    )
    assert r.status == 403
