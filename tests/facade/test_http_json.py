"""The façade's HTTP+JSON binding: its routes, its error bodies and statuses, its streams,
and who may call it."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest

from a2a_continue.facade import http_json
from tests.support import bindings as b
from tests.support.client import Client, register, token
from tests.support.fakes import StartFake, WeatherFake

JSON = dict[str, Any]
ROUTES = [(method, path) for method, path, *_ in (*http_json.V10, *http_json.V03)]
PUSH_ROUTES = [
    (m, p, bd.method) for m, p, bd, *_ in (*http_json.V10, *http_json.V03) if "push" in p
]


def _path(agent_id: str, template: str) -> str:
    return f"/a2a/{agent_id}" + template.format(task_id="T1", config_id="C1")


def sse_data(raw: bytes) -> list[tuple[str, Any]]:
    """The (event name, decoded data) of each server-sent event."""
    events = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((name, msgspec.json.decode("\n".join(data))))
    return events


@pytest.mark.parametrize(("method", "template"), ROUTES)
async def test_without_a_token_every_route_answers_401_whether_the_agent_exists_or_not(
    client: Client, method: str, template: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0", visibility="public")
    for target in (agent_id, str(uuid.uuid4())):
        r = await client.call(method, _path(target, template), {}, bearer=None)
        assert r.status == 401, (method, template, r.raw)
        assert target not in r.raw.decode()


@pytest.mark.parametrize(("method", "template", "name"), PUSH_ROUTES)
async def test_push_config_routes_reach_their_method(
    client: Client, method: str, template: str, name: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    body = {"url": "https://hooks.example.com/a2a"} if method == "POST" else None
    r = await client.call(method, _path(agent_id, template), body)
    version = "0.3" if "/v1/" in template else "1.0"
    refused = b.refusal(r, b.REST, version)
    # The method looks the task up first: an unknown task is the binding's task-not-found.
    assert (refused.http_status, refused.code) == (404, -32001), (name, r.raw)
    if version == "1.0":
        assert r.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    else:
        assert r.json()["type"] == "TaskNotFoundError"


async def test_an_unknown_task_is_404_with_the_reason_task_not_found(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await client.call("GET", f"/a2a/{agent_id}/tasks/nope")
    assert r.status == 404
    error = r.json()["error"]
    assert (error["code"], error["status"]) == (404, "NOT_FOUND")
    assert error["details"][0]["reason"] == "TASK_NOT_FOUND"
    r = await client.call("GET", f"/a2a/{agent_id}/v1/tasks/nope")
    assert (r.status, r.json()["type"], r.json()["code"]) == (404, "TaskNotFoundError", -32001)


async def test_a_body_that_is_not_json_is_a_400_in_the_binding_shape(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await client.call("POST", f"/a2a/{agent_id}/message:send", data=b"{nope")
    assert r.status == 400
    assert r.json()["error"]["details"][0]["reason"] == "JSON_PARSE_ERROR"
    r = await client.call("POST", f"/a2a/{agent_id}/v1/message:send", data=b"[1]")
    assert (r.status, r.json()["type"]) == (400, "InvalidRequestError")


async def test_a_send_needs_the_invoke_permission(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    reader = token(perms=["a2a.read"])
    body = {"message": b.message(b.REST, "1.0", "weather?")}
    r = await client.call("POST", f"/a2a/{agent_id}/message:send", body, bearer=reader)
    assert (r.status, r.headers["Content-Type"]) == (403, "application/problem+json")


async def test_an_unreachable_agent_is_a_502_unavailable(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    body = {"message": b.message(b.REST, "1.0", "weather?")}
    r = await client.call("POST", f"/a2a/{agent_id}/message:send", body)
    assert (r.status, r.json()["error"]["status"]) == (502, "UNAVAILABLE")
    assert r.json()["error"]["details"][0]["metadata"]["status"] == "502"


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_follow_up_to_a_terminal_task_is_refused_with_its_state(
    client: Client, fake_agent: StartFake, version: str
) -> None:
    agent = await fake_agent(WeatherFake(version))
    agent_id = await register(client, agent.url, version)
    started = b.result(
        await b.send(client, agent_id, b.REST, version, b.message(b.REST, version, "now")),
        b.REST,
        version,
    )
    task_id = started["task"]["id"]
    follow_up = b.message(b.REST, version, "Paris", task_id)
    refused = b.refusal(await b.send(client, agent_id, b.REST, version, follow_up), b.REST, version)
    assert refused.code == (-32004 if version == "1.0" else -32602)
    assert refused.members["state"] == "completed"
    assert len(agent.received) == 1  # the follow-up never reached the agent


async def test_a_1_0_stream_is_server_sent_stream_responses(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await fake_agent(WeatherFake("1.0"))
    agent_id = await register(client, agent.url, "1.0")
    body = {"message": b.message(b.REST, "1.0", "weather?")}
    r = await client.call("POST", f"/a2a/{agent_id}/message:stream", body)
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    [(name, frame)] = sse_data(r.raw)
    assert name == "message"
    assert frame["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert "jsonrpc" not in frame


async def test_a_0_3_stream_is_server_sent_protobuf_json(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await fake_agent(WeatherFake("0.3"))
    agent_id = await register(client, agent.url, "0.3")
    body = {"request": b.message(b.REST, "0.3", "weather?")}
    r = await client.call("POST", f"/a2a/{agent_id}/v1/message:stream", body)
    [(_, frame)] = sse_data(r.raw)
    assert frame["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert "kind" not in frame["task"]


async def test_subscribing_to_a_terminal_task_is_refused_before_any_stream(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await fake_agent(WeatherFake("1.0"))
    agent_id = await register(client, agent.url, "1.0")
    sent = await b.send(client, agent_id, b.REST, "1.0", b.message(b.REST, "1.0", "now"))
    task_id = b.result(sent, b.REST, "1.0")["task"]["id"]
    for method in ("GET", "POST"):
        r = await client.call(method, f"/a2a/{agent_id}/tasks/{task_id}:subscribe")
        refused = b.refusal(r, b.REST, "1.0")
        assert (refused.http_status, refused.code) == (400, -32004)


async def test_a_0_3_send_in_snake_case_is_read_as_the_protobuf_json_allows(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await fake_agent(WeatherFake("0.3"))
    agent_id = await register(client, agent.url, "0.3")
    body = {
        "request": {"message_id": "m-1", "role": "ROLE_USER", "content": [{"text": "weather?"}]},
        "configuration": {"accepted_output_modes": ["text/plain"]},
    }
    r = await client.call("POST", f"/a2a/{agent_id}/v1/message:send", body)
    assert r.json()["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    [sent] = agent.received
    assert sent["params"]["message"]["parts"] == [{"kind": "text", "text": "weather?"}]
    assert sent["params"]["configuration"]["acceptedOutputModes"] == ["text/plain"]


async def test_a_0_3_request_with_one_field_in_both_spellings_is_a_400_naming_it(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await fake_agent(WeatherFake("0.3"))
    agent_id = await register(client, agent.url, "0.3")
    message = {"message_id": "m-1", "messageId": "m-1", "role": "ROLE_USER",
               "content": [{"text": "weather?"}]}  # fmt: skip
    r = await client.call("POST", f"/a2a/{agent_id}/v1/message:send", {"request": message})
    assert (r.status, r.json()["type"]) == (400, "InvalidParamsError")
    assert r.json()["message"].startswith("$.params.request.messageId: is given twice")
    r = await client.call("GET", f"/a2a/{agent_id}/v1/tasks/T1?history_length=1&historyLength=1")
    assert (r.status, r.json()["type"]) == (400, "InvalidParamsError")
    assert r.json()["message"].startswith("$.query.historyLength: is given twice")
    assert agent.received == []


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_retried_send_is_answered_from_the_kept_answer(
    client: Client, fake_agent: StartFake, version: str
) -> None:
    agent = await fake_agent(WeatherFake(version))
    agent_id = await register(client, agent.url, version)
    message = b.message(b.REST, version, "weather?")
    first = await b.send(client, agent_id, b.REST, version, message)
    again = await b.send(client, agent_id, b.REST, version, message)
    assert (first.status, again.status) == (200, 200)
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(agent.received) == 1


async def test_a_retried_cancel_with_its_key_cancels_once(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await fake_agent(WeatherFake("1.0"))
    agent_id = await register(client, agent.url, "1.0")
    sent = await b.send(client, agent_id, b.REST, "1.0", b.message(b.REST, "1.0", "weather?"))
    task_id = b.result(sent, b.REST, "1.0")["task"]["id"]
    path = f"/a2a/{agent_id}/tasks/{task_id}:cancel"
    key = {"Idempotency-Key": "cancel-once"}
    first = await client.call("POST", path, {}, headers=key)
    again = await client.call("POST", path, {}, headers=key)
    assert first.json()["status"]["state"] == "TASK_STATE_CANCELED"
    assert (again.json(), again.headers["Idempotent-Replayed"]) == (first.json(), "true")
    assert [r["method"] for r in agent.received] == ["SendMessage", "CancelTask"]
