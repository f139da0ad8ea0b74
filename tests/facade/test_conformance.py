"""The façade as conformant as the agent behind it, on both bindings and both versions:
messages validated as A2A defines them, a negative historyLength refused, the extended
card asked of the agent or refused as unsupported, nothing readable without a token, and no
context or referenced task of another caller reachable by naming it."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

from tests.support import bindings as b
from tests.support.client import Client, register, token
from tests.support.fakes import StartFake, WeatherFake, rpc_result

JSON = dict[str, Any]
ALL = pytest.mark.parametrize(("binding", "version"), b.ALL, ids=b.IDS)


@ALL
@pytest.mark.parametrize("field", ["messageId", "role", "parts"])
async def test_a_message_without_a_required_field_is_refused_naming_it(
    client: Client, fake_agent: StartFake, binding: str, version: str, field: str
) -> None:
    agent = await fake_agent(WeatherFake(version))
    agent_id = await register(client, agent.url, version)
    message = b.message(binding, version, "weather?")
    named = b.parts_field(binding, version) if field == "parts" else field
    message.pop(named)
    r = await b.send(client, agent_id, binding, version, message)
    refused = b.refusal(r, binding, version)
    assert refused.code == -32602
    assert named in refused.message
    assert agent.received == []  # nothing reached the agent


@ALL
async def test_a_message_with_no_parts_is_refused(
    client: Client, fake_agent: StartFake, binding: str, version: str
) -> None:
    agent = await fake_agent(WeatherFake(version))
    agent_id = await register(client, agent.url, version)
    message = b.message(binding, version, "weather?")
    message[b.parts_field(binding, version)] = []
    refused = b.refusal(await b.send(client, agent_id, binding, version, message), binding, version)
    assert (refused.code, agent.received) == (-32602, [])


@ALL
async def test_a_valid_message_is_sent_with_a_messageid_of_the_gateway(
    client: Client, fake_agent: StartFake, binding: str, version: str
) -> None:
    agent = await fake_agent(WeatherFake(version))
    agent_id = await register(client, agent.url, version)
    message = b.message(binding, version, "weather?")
    b.result(await b.send(client, agent_id, binding, version, message), binding, version)
    [sent] = agent.received
    assert sent["params"]["message"]["messageId"] != message["messageId"]


@ALL
async def test_get_task_with_a_negative_history_length_is_refused(
    client: Client, fake_agent: StartFake, binding: str, version: str
) -> None:
    agent = await fake_agent(WeatherFake(version))
    agent_id = await register(client, agent.url, version)
    sent = await b.send(client, agent_id, binding, version, b.message(binding, version, "weather?"))
    answer = b.result(sent, binding, version)
    task = answer.get("task", answer)
    r = await b.get(client, agent_id, binding, version, task["id"], historyLength=-1)
    refused = b.refusal(r, binding, version)
    assert refused.code == -32602 and "historyLength" in refused.message


async def test_list_tasks_with_a_negative_history_length_is_refused_over_json_rpc(
    client: Client,
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await b.rpc(client, agent_id, "ListTasks", {"historyLength": -1}, version="1.0")
    refused = b.refusal(r, b.JSONRPC, "1.0")
    assert refused.code == -32602 and "historyLength" in refused.message


async def test_list_tasks_with_a_negative_history_length_is_refused_over_http_json(
    client: Client,
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await client.call("GET", f"/a2a/{agent_id}/tasks?historyLength=-1")
    refused = b.refusal(r, b.REST, "1.0")
    assert (refused.http_status, refused.code) == (400, -32602)
    assert "historyLength" in refused.message


@ALL
async def test_extended_card_of_an_agent_that_declares_none_is_an_unsupported_operation(
    client: Client, fake_agent: StartFake, binding: str, version: str
) -> None:
    agent = await fake_agent(WeatherFake(version))
    agent_id = await register(client, agent.url, version)
    refused = b.refusal(await b.extended_card(client, agent_id, binding, version), binding, version)
    assert refused.code == -32004
    assert agent.received == []


def _extended_answer(version: str) -> Any:
    async def answer(request: JSON) -> JSON:
        extended = {
            "name": "Forecaster (extended)",
            "description": "More forecasts for known callers.",
            "version": "2.0.0",
            "url": "http://10.0.0.9:9000/",
            "supportedInterfaces": [
                {"url": "http://10.0.0.9:9000/", "protocolBinding": "JSONRPC"},
            ],
            "securitySchemes": {"k": {"type": "apiKey", "in": "header", "name": "K"}},
            "capabilities": {"streaming": False, "extendedAgentCard": True},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "hourly", "name": "Hourly", "description": "d", "tags": []}],
        }
        return rpc_result(request, extended)

    return answer


@ALL
async def test_extended_card_is_asked_of_the_agent_with_its_credentials_and_rewritten(
    client: Client,
    fake_agent: StartFake,
    db: asyncpg.Connection,
    gateway_url: str,
    binding: str,
    version: str,
) -> None:
    agent = await fake_agent(_extended_answer(version))
    auth = {"type": "bearer", "token": "agent-secret"}
    agent_id = await register(client, agent.url, version, auth=auth)
    declared = {"name": "Forecaster", "capabilities": {"extendedAgentCard": True}}
    await db.execute("UPDATE a2a_agents SET card = $1 WHERE id = $2", declared, uuid.UUID(agent_id))
    r = await b.extended_card(client, agent_id, binding, version)
    card = b.result(r, binding, version)
    [asked] = agent.received
    expected = "GetExtendedAgentCard" if version == "1.0" else "agent/getAuthenticatedExtendedCard"
    assert asked["method"] == expected
    assert agent.headers[0]["Authorization"] == "Bearer agent-secret"
    assert card["name"] == "Forecaster (extended)"
    assert [s["id"] for s in card["skills"]] == ["hourly"]
    assert "10.0.0.9" not in r.raw.decode() and "apiKey" not in r.raw.decode()
    assert "agent-secret" not in r.raw.decode()
    endpoint = f"{gateway_url}/a2a/{agent_id}"
    if version == "1.0":
        assert {i["url"] for i in card["supportedInterfaces"]} == {endpoint}
        assert card["securitySchemes"]["bearer"] == {"httpAuthSecurityScheme": b.BEARER}
    else:
        assert card["url"] == endpoint
        assert card["securitySchemes"]["bearer"]["type"] == "http"


@ALL
async def test_without_a_token_a_send_is_401_whether_the_agent_exists_or_not(
    client: Client, binding: str, version: str
) -> None:
    public = await register(client, "http://127.0.0.1:9/", version, visibility="public")
    private = await register(client, "http://127.0.0.1:9/", version)
    anonymous = client.as_(None)  # type: ignore[arg-type]
    for agent_id in (public, private, str(uuid.uuid4())):
        r = await b.send(anonymous, agent_id, binding, version, b.message(binding, version, "hi"))
        assert (r.status, r.headers["Content-Type"]) == (401, "application/problem+json")
        assert agent_id not in r.raw.decode()


def _started_task(r: Any, binding: str, version: str) -> JSON:
    result: JSON = b.result(r, binding, version)
    task: JSON = result.get("task", result)
    return task


@ALL
async def test_a_send_naming_the_context_of_another_callers_task_is_task_not_found(
    client: Client, fake_agent: StartFake, binding: str, version: str
) -> None:
    agent = await fake_agent(WeatherFake(version))
    agent_id = await register(client, agent.url, version, visibility="public")
    sent = await b.send(client, agent_id, binding, version, b.message(binding, version, "hi"))
    alices = _started_task(sent, binding, version)
    message = {**b.message(binding, version, "hi"), "contextId": alices["contextId"]}

    r = await b.send(client.as_(token("bob@example.com")), agent_id, binding, version, message)

    refused = b.refusal(r, binding, version)
    assert refused.code == -32001
    assert refused.http_status == (404 if binding == b.REST else 200)
    assert "alice" not in r.raw.decode()
    assert len(agent.received) == 1


@ALL
async def test_a_send_referencing_another_callers_task_is_task_not_found(
    client: Client, fake_agent: StartFake, binding: str, version: str
) -> None:
    agent = await fake_agent(WeatherFake(version))
    agent_id = await register(client, agent.url, version, visibility="public")
    sent = await b.send(client, agent_id, binding, version, b.message(binding, version, "hi"))
    alices = _started_task(sent, binding, version)
    message = {**b.message(binding, version, "hi"), "referenceTaskIds": [alices["id"]]}

    r = await b.send(client.as_(token("bob@example.com")), agent_id, binding, version, message)

    assert b.refusal(r, binding, version).code == -32001
    assert "alice" not in r.raw.decode()
    assert len(agent.received) == 1
