"""The demo's sample agent answers A2A 0.3 and 1.0 JSON-RPC on one endpoint."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from a2a_continue.a2a import answers
from a2a_continue.a2a.agent_stream import stream_rpc
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.ops.sample_agent import start_sample_agent
from tests.rpc import message_v03, message_v10, rpc

JSON = dict[str, Any]


@pytest.fixture
async def agent_url() -> AsyncIterator[str]:
    runner, url = await start_sample_agent()
    try:
        yield url
    finally:
        await runner.cleanup()


@pytest.fixture
async def slow_url() -> AsyncIterator[str]:
    """A sample agent whose every turn works for 0.3 s."""
    runner, url = await start_sample_agent(slow_s=0.3)
    try:
        yield url
    finally:
        await runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_v10_task_asks_for_city_then_completes_with_forecast(
    http: aiohttp.ClientSession, agent_url: str
) -> None:
    started = await rpc(http, agent_url, "SendMessage", message_v10("weather?"))
    task = started["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    assert task["status"]["message"]["parts"] == [{"text": "Which city?"}]

    done = await rpc(http, agent_url, "SendMessage", message_v10("Paris", task["id"]))
    task = done["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["name"] == "forecast"
    assert task["artifacts"][0]["parts"] == [{"text": "Sunny in Paris"}]


async def test_v03_task_asks_for_city_then_completes_with_forecast(
    http: aiohttp.ClientSession, agent_url: str
) -> None:
    started = await rpc(http, agent_url, "message/send", message_v03("weather?"))
    task = started["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "input-required"
    assert task["status"]["message"]["role"] == "agent"

    done = await rpc(http, agent_url, "message/send", message_v03("Rome", task["id"]))
    task = done["result"]
    assert task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "Sunny in Rome"}]


async def test_cancel_of_terminal_task_is_refused_in_both_versions(
    http: aiohttp.ClientSession, agent_url: str
) -> None:
    started = await rpc(http, agent_url, "SendMessage", message_v10("weather?"))
    task_id = started["result"]["task"]["id"]
    canceled = await rpc(http, agent_url, "CancelTask", {"id": task_id})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"

    for method in ("CancelTask", "tasks/cancel"):
        refused = await rpc(http, agent_url, method, {"id": task_id})
        assert refused["error"]["code"] == -32002


async def test_message_to_terminal_task_uses_each_versions_error_code(
    http: aiohttp.ClientSession, agent_url: str
) -> None:
    started = await rpc(http, agent_url, "SendMessage", message_v10("weather?"))
    task_id = started["result"]["task"]["id"]
    await rpc(http, agent_url, "SendMessage", message_v10("Oslo", task_id))

    v10 = await rpc(http, agent_url, "SendMessage", message_v10("again", task_id))
    v03 = await rpc(http, agent_url, "message/send", message_v03("again", task_id))
    assert (v10["error"]["code"], v03["error"]["code"]) == (-32004, -32602)


async def test_unknown_task_is_not_found_in_both_versions(
    http: aiohttp.ClientSession, agent_url: str
) -> None:
    for method, params in [
        ("SendMessage", message_v10("Paris", "no-such-task")),
        ("message/send", message_v03("Paris", "no-such-task")),
        ("CancelTask", {"id": "no-such-task"}),
        ("tasks/cancel", {"id": "no-such-task"}),
    ]:
        answer = await rpc(http, agent_url, method, params)
        assert answer["error"] == {"code": -32001, "message": "Task not found"}


async def test_malformed_requests_get_json_rpc_errors(
    http: aiohttp.ClientSession, agent_url: str
) -> None:
    async with http.post(agent_url, data=b"{not json") as response:
        assert (await response.json())["error"]["code"] == -32700
    unknown = await rpc(http, agent_url, "tasks/pushNotificationConfig/set", {"id": "x"})
    assert unknown["error"]["code"] == -32601
    body = {"jsonrpc": "2.0", "id": "req-1", "method": "SendMessage"}
    async with http.post(agent_url, json=body) as response:
        assert (await response.json())["error"]["code"] == -32602


async def _stream(http: aiohttp.ClientSession, url: str, method: str, params: JSON) -> list[Any]:
    version = "0.3" if "/" in method else "1.0"
    target = AgentTarget(endpoint_url=url, protocol_version=version, timeout_s=5)
    payload = {"jsonrpc": "2.0", "id": "s1", "method": method, "params": params}
    frames = stream_rpc(http, target, payload, 1 << 20)
    return [answers.read(f.body, version, frame=True) async for f in frames]


@pytest.mark.parametrize(
    ("method", "message"),
    [("SendStreamingMessage", message_v10), ("message/stream", message_v03)],
)
async def test_a_streamed_task_asks_for_a_city_then_streams_the_forecast_in_chunks(
    http: aiohttp.ClientSession, agent_url: str, method: str, message: Any
) -> None:
    first = await _stream(http, agent_url, method, message("weather?"))
    assert [(u.kind, u.state) for u in first] == [
        ("task", "working"),
        ("status-update", "input-required"),
    ]
    task_id = first[0].task_id
    second = await _stream(http, agent_url, method, message("Oslo", task_id))
    assert [(u.kind, u.state) for u in second] == [
        ("status-update", "working"),
        ("artifact-update", None),
        ("artifact-update", None),
        ("status-update", "completed"),
    ]
    chunks = [(c.append, c.artifact["parts"][0]["text"]) for u in second for c in u.artifacts]
    assert chunks == [(False, "Sunny"), (True, " in Oslo")]
    assert second[-1].final is (method == "message/stream")


GET = {"1.0": "GetTask", "0.3": "tasks/get"}
SEND = {"1.0": ("SendMessage", message_v10), "0.3": ("message/send", message_v03)}
NOW = {"1.0": {"returnImmediately": True}, "0.3": {"blocking": False}}


def task_of(answer: JSON) -> JSON:
    result: JSON = answer["result"]
    return result.get("task", result) if "kind" not in result else result


def state_of(task: JSON) -> str:
    state: str = task["status"]["state"]
    return state.removeprefix("TASK_STATE_").lower().replace("_", "-")


async def get_task(http: aiohttp.ClientSession, url: str, version: str, task_id: str) -> JSON:
    return task_of(await rpc(http, url, GET[version], {"id": task_id}))


async def reaches(
    http: aiohttp.ClientSession, url: str, version: str, task_id: str, state: str
) -> JSON:
    """Poll GetTask (bounded) until the task shows ``state``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        task = await get_task(http, url, version, task_id)
        if state_of(task) == state:
            return task
        await asyncio.sleep(0.05)
    pytest.fail(f"task {task_id} never became {state}")


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_get_task_answers_a_known_task_as_last_answered_and_not_found_otherwise(
    http: aiohttp.ClientSession, agent_url: str, version: str
) -> None:
    method, message = SEND[version]
    started = task_of(await rpc(http, agent_url, method, message("weather?")))

    got = await get_task(http, agent_url, version, started["id"])

    assert got == started
    unknown = await rpc(http, agent_url, GET[version], {"id": "no-such-task"})
    assert unknown["error"] == {"code": -32001, "message": "Task not found"}


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_slow_agent_answers_return_immediately_working_then_goes_on(
    http: aiohttp.ClientSession, slow_url: str, version: str
) -> None:
    method, message = SEND[version]
    now = {"configuration": NOW[version]}
    started = task_of(await rpc(http, slow_url, method, {**message("weather?"), **now}))
    assert state_of(started) == "working"
    assert state_of(await get_task(http, slow_url, version, started["id"])) == "working"

    asking = await reaches(http, slow_url, version, started["id"], "input-required")
    assert asking["status"]["message"]["parts"][0]["text"] == "Which city?"
    answered = task_of(await rpc(http, slow_url, method, {**message("Oslo", started["id"]), **now}))
    assert state_of(answered) == "working"
    done = await reaches(http, slow_url, version, started["id"], "completed")
    assert done["artifacts"][0]["parts"][0]["text"] == "Sunny in Oslo"


async def test_a_slow_agent_answers_a_blocking_send_once_its_turn_is_over(
    http: aiohttp.ClientSession, slow_url: str
) -> None:
    started = task_of(await rpc(http, slow_url, "SendMessage", message_v10("weather?")))
    assert state_of(started) == "input-required"
    done = task_of(await rpc(http, slow_url, "SendMessage", message_v10("Oslo", started["id"])))
    assert state_of(done) == "completed"


async def test_a_slow_task_canceled_while_working_stays_canceled(
    http: aiohttp.ClientSession, slow_url: str
) -> None:
    params = {**message_v10("weather?"), "configuration": {"returnImmediately": True}}
    task_id = task_of(await rpc(http, slow_url, "SendMessage", params))["id"]

    canceled = await rpc(http, slow_url, "CancelTask", {"id": task_id})

    assert state_of(canceled["result"]) == "canceled"
    await asyncio.sleep(0.4)  # past the end of the turn it was working on
    assert state_of(await get_task(http, slow_url, "1.0", task_id)) == "canceled"


@pytest.mark.parametrize(
    ("method", "send"), [("SubscribeToTask", "SendMessage"), ("tasks/resubscribe", "message/send")]
)
async def test_a_subscription_shows_the_working_task_then_the_end_of_its_turn(
    http: aiohttp.ClientSession, slow_url: str, method: str, send: str
) -> None:
    version = "0.3" if "/" in method else "1.0"
    params = {**SEND[version][1]("weather?"), "configuration": NOW[version]}
    task_id = task_of(await rpc(http, slow_url, send, params))["id"]

    frames = await _stream(http, slow_url, method, {"id": task_id})

    assert [(u.kind, u.state) for u in frames] == [
        ("task", "working"),
        ("status-update", "input-required"),
    ]
    again = await _stream(http, slow_url, method, {"id": task_id})
    assert [(u.kind, u.state) for u in again] == [("task", "input-required")]
    await rpc(http, slow_url, SEND[version][0], SEND[version][1]("Oslo", task_id))
    for refused, code in [(task_id, -32004), ("no-such-task", -32001)]:
        [error] = await _stream(http, slow_url, method, {"id": refused})
        assert (error.kind, error.error_code) == ("error", code)
