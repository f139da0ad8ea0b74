"""The edge layer: request ids, trace context, one log line per request, one error layer."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

import aiohttp
import asyncpg
import msgspec
import pytest
from starlette.requests import Request
from starlette.responses import Response as StarletteResponse

from a2a_continue.app import ROUTES, create_app
from a2a_continue.http.routes import ApiRoute, Operation
from a2a_continue.obs.logs import REQUEST_LOGGER, JsonFormatter, TextFormatter
from a2a_continue.settings import Settings
from tests.support.agents import register_fake, start
from tests.support.client import Client, token
from tests.support.fakes import StartFake, WeatherFake
from tests.support.processes import GatewayProcess
from tests.support.servers import serve_asgi

GENERATED = re.compile(r"[0-9a-f]{13,32}")
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
LINE_FIELDS = {"ts", "level", "logger", "pid", "request_id", "method", "route", "status"}


def request_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == REQUEST_LOGGER]


async def test_a_well_formed_request_id_is_kept_and_echoed(client: Client) -> None:
    r = await client.call("GET", "/v1/a2a/agents", headers={"X-Request-ID": "abc-1.2:Z_9"})
    assert r.status == 200
    assert r.headers["X-Request-ID"] == "abc-1.2:Z_9"


async def test_a_request_id_is_generated_when_absent(client: Client) -> None:
    first = (await client.call("GET", "/v1/a2a/agents")).headers["X-Request-ID"]
    second = (await client.call("GET", "/v1/a2a/agents")).headers["X-Request-ID"]
    assert GENERATED.fullmatch(first)
    assert first != second


@pytest.mark.parametrize("bad", ["has space", "x" * 129, "semi;colon", "é"])
async def test_a_malformed_request_id_is_replaced(client: Client, bad: str) -> None:
    r = await client.call("GET", "/v1/a2a/agents", headers={"X-Request-ID": bad})
    assert GENERATED.fullmatch(r.headers["X-Request-ID"])


@pytest.mark.parametrize(
    ("method", "path", "bearer", "status"),
    [
        ("GET", "/v1/a2a/agents", None, 401),
        ("GET", "/v1/a2a/agents", token(perms=["a2a.create"]), 403),
        ("GET", "/nowhere", "", 404),
        ("PUT", "/v1/a2a/agents", "", 405),
    ],
)
async def test_refusals_echo_the_request_id(
    client: Client, method: str, path: str, bearer: str | None, status: int
) -> None:
    headers = {"X-Request-ID": "refused-1"}
    r = await client.call(method, path, bearer=bearer, headers=headers)
    assert r.status == status
    assert r.headers["X-Request-ID"] == "refused-1"


async def test_the_request_id_and_traceparent_are_sent_to_the_agent(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    weather = WeatherFake("1.0")
    fake = await fake_agent(weather)
    r = await client.call(
        "POST",
        "/v1/a2a/agents",
        {"name": "w", "endpointUrl": fake.url, "protocolVersion": "1.0"},
    )
    agent_id = r.json()["id"]
    headers = {"X-Request-ID": "start-7", "traceparent": TRACEPARENT}
    r = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"}, headers=headers)
    assert r.status == 200, r.raw
    task_id = r.json()["result"]["task"]["id"]
    sent = fake.headers[-1]
    assert sent["X-Request-ID"] == "start-7"
    assert sent["traceparent"] == TRACEPARENT

    r = await client.call("POST", f"/v1/a2a/{agent_id}/tasks/{task_id}/messages", {"text": "x"})
    generated = r.headers["X-Request-ID"]
    assert fake.headers[-1]["X-Request-ID"] == generated
    assert "traceparent" not in fake.headers[-1]


async def test_a_malformed_traceparent_is_not_forwarded(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(WeatherFake("1.0"))
    r = await client.call(
        "POST", "/v1/a2a/agents", {"name": "w", "endpointUrl": fake.url, "protocolVersion": "1.0"}
    )
    headers = {"traceparent": "00-not-a-trace"}
    await client.call("POST", f"/v1/a2a/{r.json()['id']}/messages", {"text": "hi"}, headers=headers)
    assert "traceparent" not in fake.headers[-1]


async def test_one_json_line_per_request_carries_the_fields_and_no_secret(
    client: Client,
    db: asyncpg.Connection,
    fake_agent: StartFake,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    agent = await register_fake(
        client, fake_agent, WeatherFake("1.0"), auth={"type": "bearer", "token": "agent-pw-42"}
    )
    task = await start(client, agent)
    caplog.clear()
    headers = {"X-Request-ID": "follow-1"}
    r = await client.call(
        "POST",
        agent.messages(task["id"]) + "?apikey=qs-secret-9",
        {"text": "Paris"},
        headers=headers,
    )
    assert r.status == 200, r.raw

    lines = request_lines(caplog)
    assert len(lines) == 1
    line = msgspec.json.decode(JsonFormatter().format(lines[0]))
    assert set(line) >= LINE_FIELDS
    assert line["request_id"] == "follow-1"
    assert (line["method"], line["status"]) == ("POST", 200)
    assert line["route"] == "/v1/a2a/{agent_id}/tasks/{task_id}/messages"
    assert line["sub"] == "alice@example.com"
    assert (line["agent_id"], line["task_id"]) == (agent.id, task["id"])
    assert line["upstream"] == "ok"
    assert line["duration_ms"] >= line["upstream_ms"] >= 0
    everything = "\n".join(
        JsonFormatter().format(record) + TextFormatter().format(record) for record in caplog.records
    )
    for secret in ("agent-pw-42", "qs-secret-9", "apikey", client.bearer or "", "Paris"):
        assert secret not in everything


async def test_the_text_line_names_the_same_fields(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await client.call("GET", "/v1/a2a/agents", headers={"X-Request-ID": "text-1"})
    text = TextFormatter().format(request_lines(caplog)[-1])
    assert "GET /v1/a2a/agents 200" in text
    assert "rid=text-1" in text
    assert "sub=alice@example.com" in text


async def test_a_task_id_with_a_newline_cannot_forge_a_text_line(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    path = "/v1/a2a/00000000-0000-0000-0000-000000000000/tasks/x%0AINFO%20forged/messages"
    await client.call("POST", path, {"text": "x"})
    text = TextFormatter().format(request_lines(caplog)[-1])
    assert "\n" not in text


async def test_an_agent_failure_is_logged_with_its_reason(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, caplog: pytest.LogCaptureFixture
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    await db.execute("UPDATE a2a_agents SET endpoint_url = 'http://127.0.0.1:1/'")
    caplog.set_level(logging.INFO)
    r = await client.call("POST", agent.messages(task["id"]), {"text": "x"})
    assert r.status == 502
    line = msgspec.json.decode(JsonFormatter().format(request_lines(caplog)[-1]))
    assert line["level"] == "warning"
    assert line["upstream"] == "unreachable"
    assert line["reason"].startswith("agent-unreachable")


async def boom(request: Request) -> StarletteResponse:
    raise RuntimeError("internal detail: password=hunter2")


BOOM = ApiRoute("GET", "/v1/a2a/boom", boom, "a2a.read", Operation("Fail"))


async def test_an_unexpected_error_is_logged_once_and_answered_500(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(settings, routes=[*ROUTES, BOOM])
    caplog.set_level(logging.INFO)
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        r = await Client(base, session).call("GET", "/v1/a2a/boom", headers={"X-Request-ID": "b-1"})
    assert r.status == 500
    assert r.headers["X-Request-ID"] == "b-1"
    tracebacks = [record for record in caplog.records if record.exc_info]
    assert len(tracebacks) == 1
    assert "b-1" in tracebacks[0].getMessage()
    assert [line.levelname for line in request_lines(caplog)] == ["WARNING"]


async def test_the_request_id_and_traceparent_are_sent_on_a_streamed_call(
    client: Client, fake_agent: StartFake
) -> None:
    fake = await fake_agent(WeatherFake("1.0"))
    body = {
        "name": "w",
        "endpointUrl": fake.url,
        "protocolVersion": "1.0",
        "capabilities": {"streaming": True},
    }
    agent_id = (await client.call("POST", "/v1/a2a/agents", body)).json()["id"]
    headers = {
        "X-Request-ID": "stream-3",
        "traceparent": TRACEPARENT,
        "Accept": "text/event-stream",
    }
    r = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"}, headers=headers)
    assert r.status == 200, r.raw
    assert fake.received[-1]["method"] == "SendStreamingMessage"
    assert fake.headers[-1]["X-Request-ID"] == "stream-3"
    assert fake.headers[-1]["traceparent"] == TRACEPARENT


async def test_query_strings_never_reach_the_log_of_a_served_gateway(
    spawn_gateway: Callable[..., Awaitable[GatewayProcess]],
) -> None:
    served = await spawn_gateway()
    base, log = served.url, served.log
    bearer = {"Authorization": f"Bearer {token()}"}
    async with aiohttp.ClientSession() as session:
        for path, headers, status in [
            ("/v1/a2a/agents?access_token=SECRET-ONE", bearer, 200),
            ("/v1/a2a/agents?access_token=SECRET-TWO", {}, 401),
            ("/nowhere?access_token=SECRET-THREE", bearer, 404),
            ("/v1/a2a/agents?cursor=SECRET-FOUR", bearer, 422),
            ("/healthz?access_token=SECRET-FIVE", {}, 200),
        ]:
            async with session.get(base + path, headers=headers) as r:
                assert r.status == status, await r.read()
    await asyncio.sleep(0.2)
    written = log.read_text()
    assert "serving on" in written
    assert "SECRET" not in written
