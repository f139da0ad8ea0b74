"""The official A2A JavaScript client (@a2a-js/sdk) on its REST transport, both protocol
versions, through agents of both versions: the whole flow, and a refusal of each kind."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.support.client import Client, register, token
from tests.support.facade_clients import card_base
from tests.support.fakes import HeldAgent, StartFake
from tests.support.sdk_agent import SdkAgent

JS = Path(__file__).parent.parent / "support" / "js"
VERSIONS = [("1.0", "1.0"), ("1.0", "0.3"), ("0.3", "1.0"), ("0.3", "0.3")]

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


async def run_flow(base: str, bearer: str, version: str, *step: str) -> Any:
    """Run the JS client's flow against one agent at the gateway (or only ``step``: a call
    and its task id); return what it saw."""
    assert (JS / "node_modules" / "@a2a-js" / "sdk").is_dir(), "run `make js-clients` first"
    node = await asyncio.create_subprocess_exec(
        "node",
        str(JS / "flow.mjs"),
        base,
        bearer,
        version,
        *step,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=JS,
    )
    out, err = await asyncio.wait_for(node.communicate(), 120)
    assert node.returncode == 0, err.decode()
    return msgspec.json.decode(out.splitlines()[-1])


@pytest.mark.parametrize(("client_version", "agent_version"), VERSIONS)
async def test_js_rest_client_works_through_the_gateway(
    client: Client, gateway_url: str, sdk: SdkAgent, client_version: str, agent_version: str
) -> None:
    agent_id = await register(client, sdk.url, agent_version)
    seen = await run_flow(card_base(gateway_url, agent_id), token(), client_version)
    assert (seen["binding"], seen["protocol"]) == ("HTTP+JSON", client_version)
    assert (seen["start"], seen["question"]) == ("TASK_STATE_INPUT_REQUIRED", "Which city?")
    assert (seen["followUp"], seen["get"]) == ("TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED")
    assert seen["artifact"] == "Sunny in Paris"
    assert seen["stream"][-1] == "TASK_STATE_INPUT_REQUIRED"
    assert seen["cancel"] == "TASK_STATE_CANCELED"
    assert seen["subscribe"][0] == "TASK_STATE_INPUT_REQUIRED"
    assert seen["subscribe"][-1] == "TASK_STATE_COMPLETED"
    # one refusal of each kind
    assert seen["unknownTask"] == "TaskNotFoundError"
    assert seen["cancelAgain"] == "TaskNotCancelableError"
    # (the JS SDK's name for INVALID_PARAMS is RequestMalformedError)
    terminal = "UnsupportedOperationError" if client_version == "1.0" else "RequestMalformedError"
    assert seen["terminalFollowUp"] == terminal
    assert seen["subscribeTerminal"] == "UnsupportedOperationError"
    assert seen["badParams"] == "RequestMalformedError"
    if client_version == "1.0":
        assert seen["list"] == {"count": 2, "total": 4, "more": True}

    events = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks/{seen['taskId']}/events")).json()
    assert [(e["type"], e["newState"]) for e in events["events"]] == [
        ("task_created", "input-required"),
        ("task_continued", "completed"),
    ]


@pytest.mark.parametrize("client_version", ["1.0", "0.3"])
async def test_js_rest_client_cannot_see_another_callers_task(
    client: Client, gateway_url: str, sdk: SdkAgent, client_version: str
) -> None:
    agent_id = await register(client, sdk.url, "1.0", visibility="public")
    started = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "weather?"})
    task_id = started.json()["result"]["task"]["id"]
    bob = token("bob@example.com")
    base = card_base(gateway_url, agent_id)
    for step in ("get", "follow-up"):
        seen = await run_flow(base, bob, client_version, step, task_id)
        assert seen["refusal"] == "TaskNotFoundError", step


@pytest.mark.parametrize("client_version", ["1.0", "0.3"])
async def test_js_rest_client_is_refused_a_follow_up_while_one_is_in_flight(
    client: Client, gateway_url: str, fake_agent: StartFake, client_version: str
) -> None:
    held = HeldAgent()
    agent = await fake_agent(held)
    agent_id = await register(client, agent.url, "1.0")
    started = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "weather?"})
    task_id = started.json()["result"]["task"]["id"]
    path = f"/v1/a2a/{agent_id}/tasks/{task_id}/messages"
    in_flight = asyncio.create_task(client.call("POST", path, {"text": "Paris"}))
    await asyncio.wait_for(held.arrived.wait(), 10)
    seen = await run_flow(
        card_base(gateway_url, agent_id), token(), client_version, "follow-up", task_id
    )
    held.release.set()
    assert (await in_flight).status == 200
    # A busy task is an internal error with type task-busy (HTTP 409): the JS client has no
    # error class of its own for it, its message says why.
    assert seen["refusal"] not in ("accepted", "TaskNotFoundError")
    assert "another follow-up to this task is in flight" in seen["message"]
    assert held.follow_ups == 1
