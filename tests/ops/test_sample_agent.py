"""The sample agent: A2A 0.3 and 1.0 JSON-RPC on one endpoint, and ``a2a-continue sample-agent``
serving its card."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from a2a_continue.a2a import answers
from a2a_continue.a2a.agent_stream import stream_rpc
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.ops.sample_agent import start_sample_agent
from a2a_continue.ops.sample_card import sample_card
from tests.support.ports import busy_port, free_port
from tests.support.processes import clean_env, run_cli, sample_agent_process
from tests.support.rpc import message_v03, message_v10, rpc
from tests.support.waiting import eventually

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


async def test_v10_task_asks_for_city_then_completes_with_forecast(
    session: aiohttp.ClientSession, agent_url: str
) -> None:
    started = await rpc(session, agent_url, "SendMessage", message_v10("weather?"))
    task = started["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    assert task["status"]["message"]["parts"] == [{"text": "Which city?"}]

    done = await rpc(session, agent_url, "SendMessage", message_v10("Paris", task["id"]))
    task = done["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["name"] == "forecast"
    assert task["artifacts"][0]["parts"] == [{"text": "Sunny in Paris"}]


async def test_v03_task_asks_for_city_then_completes_with_forecast(
    session: aiohttp.ClientSession, agent_url: str
) -> None:
    started = await rpc(session, agent_url, "message/send", message_v03("weather?"))
    task = started["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "input-required"
    assert task["status"]["message"]["role"] == "agent"

    done = await rpc(session, agent_url, "message/send", message_v03("Rome", task["id"]))
    task = done["result"]
    assert task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "Sunny in Rome"}]


async def test_cancel_of_terminal_task_is_refused_in_both_versions(
    session: aiohttp.ClientSession, agent_url: str
) -> None:
    started = await rpc(session, agent_url, "SendMessage", message_v10("weather?"))
    task_id = started["result"]["task"]["id"]
    canceled = await rpc(session, agent_url, "CancelTask", {"id": task_id})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"

    for method in ("CancelTask", "tasks/cancel"):
        refused = await rpc(session, agent_url, method, {"id": task_id})
        assert refused["error"]["code"] == -32002


async def test_message_to_terminal_task_uses_each_versions_error_code(
    session: aiohttp.ClientSession, agent_url: str
) -> None:
    started = await rpc(session, agent_url, "SendMessage", message_v10("weather?"))
    task_id = started["result"]["task"]["id"]
    await rpc(session, agent_url, "SendMessage", message_v10("Oslo", task_id))

    v10 = await rpc(session, agent_url, "SendMessage", message_v10("again", task_id))
    v03 = await rpc(session, agent_url, "message/send", message_v03("again", task_id))
    assert (v10["error"]["code"], v03["error"]["code"]) == (-32004, -32602)


async def test_unknown_task_is_not_found_in_both_versions(
    session: aiohttp.ClientSession, agent_url: str
) -> None:
    for method, params in [
        ("SendMessage", message_v10("Paris", "no-such-task")),
        ("message/send", message_v03("Paris", "no-such-task")),
        ("CancelTask", {"id": "no-such-task"}),
        ("tasks/cancel", {"id": "no-such-task"}),
    ]:
        answer = await rpc(session, agent_url, method, params)
        assert answer["error"] == {"code": -32001, "message": "Task not found"}


async def test_malformed_requests_get_json_rpc_errors(
    session: aiohttp.ClientSession, agent_url: str
) -> None:
    async with session.post(agent_url, data=b"{not json") as response:
        assert (await response.json())["error"]["code"] == -32700
    unknown = await rpc(session, agent_url, "tasks/pushNotificationConfig/set", {"id": "x"})
    assert unknown["error"]["code"] == -32601
    body = {"jsonrpc": "2.0", "id": "req-1", "method": "SendMessage"}
    async with session.post(agent_url, json=body) as response:
        assert (await response.json())["error"]["code"] == -32602


async def _stream(session: aiohttp.ClientSession, url: str, method: str, params: JSON) -> list[Any]:
    version = "0.3" if "/" in method else "1.0"
    target = AgentTarget(endpoint_url=url, protocol_version=version, timeout_s=5)
    payload = {"jsonrpc": "2.0", "id": "s1", "method": method, "params": params}
    frames = stream_rpc(session, target, payload, 1 << 20)
    return [answers.read(f.body, version, frame=True) async for f in frames]


@pytest.mark.parametrize(
    ("method", "message"),
    [("SendStreamingMessage", message_v10), ("message/stream", message_v03)],
)
async def test_a_streamed_task_asks_for_a_city_then_streams_the_forecast_in_chunks(
    session: aiohttp.ClientSession, agent_url: str, method: str, message: Any
) -> None:
    first = await _stream(session, agent_url, method, message("weather?"))
    assert [(u.kind, u.state) for u in first] == [
        ("task", "working"),
        ("status-update", "input-required"),
    ]
    task_id = first[0].task_id
    second = await _stream(session, agent_url, method, message("Oslo", task_id))
    assert [(u.kind, u.state) for u in second] == [
        ("status-update", "working"),
        ("artifact-update", None),
        ("artifact-update", None),
        ("status-update", "completed"),
    ]
    chunks = [(c.append, c.artifact["parts"][0]["text"]) for u in second for c in u.artifacts]
    assert chunks == [(False, "Sunny"), (True, " in Oslo")]
    assert second[-1].final is (method == "message/stream")


# ---- GetTask, subscriptions and ``slow_s``: turns that keep a task working a while ---------

GET = {"1.0": "GetTask", "0.3": "tasks/get"}
SEND = {"1.0": ("SendMessage", message_v10), "0.3": ("message/send", message_v03)}
NOW = {"1.0": {"returnImmediately": True}, "0.3": {"blocking": False}}


def task_of(answer: JSON) -> JSON:
    result: JSON = answer["result"]
    return result.get("task", result) if "kind" not in result else result


def state_of(task: JSON) -> str:
    state: str = task["status"]["state"]
    return state.removeprefix("TASK_STATE_").lower().replace("_", "-")


async def get_task(session: aiohttp.ClientSession, url: str, version: str, task_id: str) -> JSON:
    return task_of(await rpc(session, url, GET[version], {"id": task_id}))


async def reaches(
    session: aiohttp.ClientSession, url: str, version: str, task_id: str, state: str
) -> JSON:
    """Wait until GetTask shows the task in ``state``; return it."""

    async def shown() -> JSON | None:
        task = await get_task(session, url, version, task_id)
        return task if state_of(task) == state else None

    return await eventually(shown, f"task {task_id} shown as {state}", within_s=10)


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_get_task_answers_a_known_task_as_last_answered_and_not_found_otherwise(
    session: aiohttp.ClientSession, agent_url: str, version: str
) -> None:
    method, message = SEND[version]
    started = task_of(await rpc(session, agent_url, method, message("weather?")))

    got = await get_task(session, agent_url, version, started["id"])

    assert got == started
    unknown = await rpc(session, agent_url, GET[version], {"id": "no-such-task"})
    assert unknown["error"] == {"code": -32001, "message": "Task not found"}


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_slow_agent_answers_return_immediately_working_then_goes_on(
    session: aiohttp.ClientSession, slow_url: str, version: str
) -> None:
    method, message = SEND[version]
    now = {"configuration": NOW[version]}
    started = task_of(await rpc(session, slow_url, method, {**message("weather?"), **now}))
    assert state_of(started) == "working"
    assert state_of(await get_task(session, slow_url, version, started["id"])) == "working"

    asking = await reaches(session, slow_url, version, started["id"], "input-required")
    assert asking["status"]["message"]["parts"][0]["text"] == "Which city?"
    follow_up = {**message("Oslo", started["id"]), **now}
    answered = task_of(await rpc(session, slow_url, method, follow_up))
    assert state_of(answered) == "working"
    done = await reaches(session, slow_url, version, started["id"], "completed")
    assert done["artifacts"][0]["parts"][0]["text"] == "Sunny in Oslo"


async def test_a_slow_agent_answers_a_blocking_send_once_its_turn_is_over(
    session: aiohttp.ClientSession, slow_url: str
) -> None:
    started = task_of(await rpc(session, slow_url, "SendMessage", message_v10("weather?")))
    assert state_of(started) == "input-required"
    follow_up = message_v10("Oslo", started["id"])
    done = task_of(await rpc(session, slow_url, "SendMessage", follow_up))
    assert state_of(done) == "completed"


async def test_a_slow_task_canceled_while_working_stays_canceled(
    session: aiohttp.ClientSession, slow_url: str
) -> None:
    params = {**message_v10("weather?"), "configuration": {"returnImmediately": True}}
    task_id = task_of(await rpc(session, slow_url, "SendMessage", params))["id"]

    canceled = await rpc(session, slow_url, "CancelTask", {"id": task_id})

    assert state_of(canceled["result"]) == "canceled"
    await asyncio.sleep(0.4)  # past the end of the turn it was working on
    assert state_of(await get_task(session, slow_url, "1.0", task_id)) == "canceled"


@pytest.mark.parametrize(
    ("method", "send"), [("SubscribeToTask", "SendMessage"), ("tasks/resubscribe", "message/send")]
)
async def test_a_subscription_shows_the_working_task_then_the_end_of_its_turn(
    session: aiohttp.ClientSession, slow_url: str, method: str, send: str
) -> None:
    version = "0.3" if "/" in method else "1.0"
    params = {**SEND[version][1]("weather?"), "configuration": NOW[version]}
    task_id = task_of(await rpc(session, slow_url, send, params))["id"]

    frames = await _stream(session, slow_url, method, {"id": task_id})

    assert [(u.kind, u.state) for u in frames] == [
        ("task", "working"),
        ("status-update", "input-required"),
    ]
    again = await _stream(session, slow_url, method, {"id": task_id})
    assert [(u.kind, u.state) for u in again] == [("task", "input-required")]
    await rpc(session, slow_url, SEND[version][0], SEND[version][1]("Oslo", task_id))
    for refused, code in [(task_id, -32004), ("no-such-task", -32001)]:
        [error] = await _stream(session, slow_url, method, {"id": refused})
        assert (error.kind, error.error_code) == ("error", code)


# ---- ``a2a-continue sample-agent``: the sample agent as a command, serving its card ------


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("application/json")
        return json.loads(answer.read())


def post_json(url: str, body: Any, version: str) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "A2A-Version": version},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def test_sample_agent_serves_a_1_0_card_naming_its_json_rpc_endpoint() -> None:
    port = free_port()
    with sample_agent_process("--port", str(port)) as (_, endpoint):
        assert endpoint == f"http://127.0.0.1:{port}/"
        card = get_json(f"http://127.0.0.1:{port}/.well-known/agent-card.json")
        assert card["supportedInterfaces"][0] == {
            "url": endpoint,
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }
        assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
        assert "url" not in card
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "weather?"}]}
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        answer = post_json(card["supportedInterfaces"][0]["url"], rpc, "1.0")
        assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def test_sample_agent_protocol_0_3_serves_a_0_3_card() -> None:
    port = free_port()
    with sample_agent_process("--port", str(port), "--protocol", "0.3") as (_, endpoint):
        card = get_json(f"http://127.0.0.1:{port}/.well-known/agent-card.json")
        assert card["url"] == endpoint
        assert card["preferredTransport"] == "JSONRPC"
        assert card["protocolVersion"] == "0.3.0"
        assert card["capabilities"]["streaming"] is True
        assert "supportedInterfaces" not in card
        message = {
            "kind": "message",
            "messageId": "m1",
            "role": "user",
            "parts": [{"kind": "text", "text": "weather?"}],
        }
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        assert post_json(card["url"], rpc, "0.3")["result"]["status"]["state"] == "input-required"


def test_sample_agent_card_names_the_host_the_caller_used() -> None:
    port = free_port()
    with sample_agent_process("--port", str(port)):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/.well-known/agent-card.json",
            headers={"Host": f"sample-agent:{port}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            card = json.loads(answer.read())
    assert card["supportedInterfaces"][0]["url"] == f"http://sample-agent:{port}/"


def test_sample_agent_on_a_busy_port_says_so_in_one_line_and_exits_non_zero() -> None:
    with busy_port() as port:
        done = run_cli("sample-agent", "--port", str(port), env=clean_env())
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"sample agent: cannot listen on 127.0.0.1:{port}: {os.strerror(98)}"
    ]


def test_sample_agent_refuses_an_unknown_protocol() -> None:
    done = run_cli("sample-agent", "--protocol", "2.0", env=clean_env())
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


@pytest.mark.parametrize("protocol", ["1.0", "0.3"])
def test_sample_card_advertises_streaming_and_no_push(protocol: str) -> None:
    card = sample_card("http://agent/", protocol)
    assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
    assert card["skills"][0]["id"] == "forecast"


def test_sample_agent_slow_keeps_a_task_working_before_it_asks() -> None:
    port = free_port()
    with sample_agent_process("--port", str(port), "--slow", "0.5") as (process, endpoint):
        assert process.stdout is not None
        process.stdout.readline()  # its card
        assert "works for 0.5 s" in process.stdout.readline()
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "weather?"}]}
        params = {"message": message, "configuration": {"returnImmediately": True}}
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        answer = post_json(endpoint, rpc, "1.0")
        assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"


def test_sample_agent_refuses_a_negative_slow() -> None:
    done = run_cli("sample-agent", "--slow", "-1", env=clean_env())
    assert done.returncode == 2
    assert done.stderr.strip() == "sample agent: --slow must be seconds >= 0, not -1"
