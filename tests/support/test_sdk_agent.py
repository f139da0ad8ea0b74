"""The a2a-sdk test agent answers 1.0 and 0.3 on one endpoint and records what it receives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.support.rpc import message_v03, message_v10, rpc
from tests.support.sdk_agent import SdkAgent, run_sdk_agent

JSON = dict[str, Any]


@pytest.fixture
async def agent() -> AsyncIterator[SdkAgent]:
    async with run_sdk_agent() as running:
        yield running


async def test_v10_task_asks_for_city_then_completes_with_forecast(
    session: aiohttp.ClientSession, agent: SdkAgent
) -> None:
    started = await rpc(session, agent.url, "SendMessage", message_v10("weather?"))
    task = started["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["message"]["parts"] == [{"text": "Which city?"}]

    done = await rpc(session, agent.url, "SendMessage", message_v10("Paris", task["id"]))
    task = done["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["name"] == "forecast"
    assert task["artifacts"][0]["parts"] == [{"text": "Sunny in Paris"}]


async def test_v03_task_asks_for_city_then_completes_with_forecast(
    session: aiohttp.ClientSession, agent: SdkAgent
) -> None:
    started = await rpc(session, agent.url, "message/send", message_v03("weather?"))
    task = started["result"]
    assert (task["kind"], task["status"]["state"]) == ("task", "input-required")

    done = await rpc(session, agent.url, "message/send", message_v03("Rome", task["id"]))
    task = done["result"]
    assert task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "Sunny in Rome"}]


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("auth", "TASK_STATE_AUTH_REQUIRED"),
        ("now", "TASK_STATE_COMPLETED"),
        ("fail", "TASK_STATE_FAILED"),
    ],
)
async def test_first_message_keyword_picks_the_outcome(
    session: aiohttp.ClientSession, agent: SdkAgent, text: str, state: str
) -> None:
    answer = await rpc(session, agent.url, "SendMessage", message_v10(text))
    assert answer["result"]["task"]["status"]["state"] == state


async def test_cancel_of_terminal_task_is_refused_in_both_versions(
    session: aiohttp.ClientSession, agent: SdkAgent
) -> None:
    started = await rpc(session, agent.url, "SendMessage", message_v10("weather?"))
    task_id = started["result"]["task"]["id"]
    canceled = await rpc(session, agent.url, "CancelTask", {"id": task_id})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"

    for method in ("CancelTask", "tasks/cancel"):
        refused = await rpc(session, agent.url, method, {"id": task_id})
        assert refused["error"]["code"] == -32002


async def test_message_to_terminal_task_is_unsupported(
    session: aiohttp.ClientSession, agent: SdkAgent
) -> None:
    started = await rpc(session, agent.url, "SendMessage", message_v10("now"))
    task_id = started["result"]["task"]["id"]
    v10 = await rpc(session, agent.url, "SendMessage", message_v10("again", task_id))
    v03 = await rpc(session, agent.url, "message/send", message_v03("again", task_id))
    assert (v10["error"]["code"], v03["error"]["code"]) == (-32004, -32004)


async def test_unknown_task_is_not_found_in_both_versions(
    session: aiohttp.ClientSession, agent: SdkAgent
) -> None:
    for method, params in [
        ("SendMessage", message_v10("Paris", "no-such-task")),
        ("message/send", message_v03("Paris", "no-such-task")),
        ("CancelTask", {"id": "no-such-task"}),
        ("tasks/cancel", {"id": "no-such-task"}),
    ]:
        answer = await rpc(session, agent.url, method, params)
        assert answer["error"]["code"] == -32001


async def test_v10_method_without_version_header_is_refused(
    session: aiohttp.ClientSession, agent: SdkAgent
) -> None:
    body = {"jsonrpc": "2.0", "id": "req-1", "method": "SendMessage", "params": message_v10("hi")}
    async with session.post(agent.url, json=body) as response:
        assert (await response.json())["error"]["code"] == -32009


async def test_received_holds_each_request_body_and_its_headers(
    session: aiohttp.ClientSession, agent: SdkAgent
) -> None:
    first = message_v10("weather?")
    await rpc(session, agent.url, "SendMessage", first)
    await rpc(session, agent.url, "tasks/cancel", {"id": "no-such-task"})

    assert [body["method"] for body in agent.received] == ["SendMessage", "tasks/cancel"]
    assert agent.received[0]["params"] == first
    assert [headers["a2a-version"] for headers in agent.headers] == ["1.0", "0.3"]
