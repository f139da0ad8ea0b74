"""Text PostgreSQL cannot store (U+0000), nesting depth, id lengths, credential headers,
slow bodies: a clear 4xx for callers, a 502 for agents, nothing an agent said lost."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import asyncpg
import msgspec
import pytest

from a2a_continue.app import create_app
from a2a_continue.core.access.callers import mint_token
from a2a_continue.limits import MAX_JSON_DEPTH, json_depth
from a2a_continue.settings import Settings
from tests.support.client import JWT_SECRET, Client, assert_problem, register
from tests.support.database import TASKS_WITH_CLAIMS, counts
from tests.support.fakes import JSON, Scripted, StartFake, task_v10
from tests.support.servers import serve_asgi

NUL = "\x00"
STAND_IN = "\ufffd"


async def scripted_agent(client: Client, fake_agent: StartFake, script: Scripted) -> str:
    fake = await fake_agent(script)
    return await register(client, fake.url)


async def started(client: Client, agent: str) -> None:
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw


def nested(depth: int) -> Any:
    """A JSON value whose arrays nest ``depth`` levels."""
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


# ---- U+0000 from callers ------------------------------------------------------------------

AGENT_BODIES = {
    "name": {"name": f"a{NUL}b"},
    "team": {"teamId": f"t{NUL}"},
    "url": {"endpointUrl": f"http://127.0.0.1:9/{NUL}"},
    "header-credential": {"auth": {"type": "headers", "headers": {"X-Key": f"k{NUL}"}}},
    "bearer": {"auth": {"type": "bearer", "token": f"t{NUL}k"}},
}
SEND_BODIES = {
    "text": {"text": f"hi{NUL}"},
    "metadata": {"text": "hi", "metadata": {"k": f"v{NUL}"}},
    "metadata-key": {"text": "hi", "metadata": {f"k{NUL}": 1}},
    "data-part": {"message": {"parts": [{"data": {"deep": [f"{NUL}"]}}]}},
    "context": {"message": {"parts": [{"text": "x"}], "contextId": f"C{NUL}"}},
}


@pytest.mark.parametrize("field", sorted(AGENT_BODIES))
async def test_registration_with_nul_in_any_string_is_422(
    client: Client, db: asyncpg.Connection, field: str
) -> None:
    body = {"name": "n", "endpointUrl": "http://127.0.0.1:9/", "protocolVersion": "1.0"}
    body.update(AGENT_BODIES[field])
    r = await client.call("POST", "/v1/a2a/agents", body)
    assert "U+0000" in assert_problem(r, 422)["detail"]
    assert await counts(db) == (0, 0, 0)


@pytest.mark.parametrize("field", sorted(AGENT_BODIES))
async def test_patch_with_nul_in_any_string_is_422(
    client: Client, db: asyncpg.Connection, field: str
) -> None:
    agent = await register(client, "http://127.0.0.1:9/")
    before = await db.fetchrow("SELECT * FROM a2a_agents")
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent}", AGENT_BODIES[field])
    assert_problem(r, 422)
    assert await db.fetchrow("SELECT * FROM a2a_agents") == before


@pytest.mark.parametrize("field", sorted(SEND_BODIES))
async def test_start_and_follow_up_with_nul_in_any_string_are_422(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, field: str
) -> None:
    script = Scripted()
    agent = await scripted_agent(client, fake_agent, script)
    await started(client, agent)
    before = await counts(db)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", SEND_BODIES[field])
    assert_problem(r, 422)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", SEND_BODIES[field])
    assert_problem(r, 422)
    assert await counts(db) == before
    assert len(script.sent) == 1


async def test_path_id_and_query_values_with_nul_are_422(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await scripted_agent(client, fake_agent, Scripted())
    await started(client, agent)
    task = f"/v1/a2a/{agent}/tasks/T%001"
    for method, path in [
        ("GET", task),
        ("GET", task + "/events"),
        ("POST", task + "/cancel"),
        ("POST", task + "/messages"),
        ("GET", f"/v1/a2a/{agent}/tasks?contextId=C%00"),
        ("GET", f"/v1/a2a/{agent}/tasks?state=work%00ing"),
        ("GET", "/v1/a2a/agents?cursor=%00"),
    ]:
        body = {"text": "x"} if path.endswith("/messages") else None
        assert_problem(await client.call(method, path, body), 422)


@pytest.mark.parametrize(
    "claims", [{"sub": f"alice{NUL}@example.com"}, {"teams": ["ops", f"o{NUL}ps"]}]
)
async def test_token_with_nul_in_sub_or_teams_is_401(client: Client, claims: JSON) -> None:
    bearer = mint_token(
        JWT_SECRET, claims.get("sub", "alice@example.com"), ["*"], claims.get("teams", [])
    )
    r = await client.call("GET", "/v1/a2a/agents", bearer=bearer)
    assert_problem(r, 401)


# ---- U+0000 from agents -------------------------------------------------------------------


async def test_start_answered_with_nul_everywhere_is_200_and_recorded_with_stand_ins(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted(start=lambda r: task_v10(f"T{NUL}1", "input-required", f"C{NUL}", f"a{NUL}"))
    agent = await scripted_agent(client, fake_agent, script)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    assert r.raw == script.sent[-1]
    task_id = f"T{STAND_IN}1"
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks/{quote(task_id)}")
    assert r.status == 200, r.raw
    task = r.json()
    assert task["contextId"] == f"C{STAND_IN}"
    assert task["statusMessage"]["parts"] == [{"text": f"a{STAND_IN}"}]
    assert task["artifacts"][0]["parts"] == [{"text": f"a{STAND_IN}"}]
    kinds = await db.fetch("SELECT type FROM a2a_task_events ORDER BY seq")
    assert [k["type"] for k in kinds] == ["task_created"]


async def test_follow_up_answered_with_nul_is_200_and_recorded_with_stand_ins(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    def echo(request: JSON) -> JSON:
        text = request["params"]["message"]["parts"][0]["text"]
        return task_v10("T1", "completed", text=text + NUL)

    script = Scripted(follow_up=echo)
    agent = await scripted_agent(client, fake_agent, script)
    await started(client, agent)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "Paris"})
    assert r.status == 200, r.raw
    assert r.raw == script.sent[-1]
    assert r.headers["A2A-Task-State"] == "completed"
    task = (await client.call("GET", f"/v1/a2a/{agent}/tasks/T1")).json()
    assert task["statusMessage"]["parts"] == [{"text": f"Paris{STAND_IN}"}]
    logged = (await client.call("GET", f"/v1/a2a/{agent}/tasks/T1/events")).json()["events"]
    assert [e["type"] for e in logged] == ["task_created", "task_continued"]


async def test_cancel_answered_with_nul_is_200_and_recorded_with_stand_ins(
    client: Client, fake_agent: StartFake
) -> None:
    script = Scripted(cancel=lambda r: task_v10("T1", "canceled", text=f"bye{NUL}"))
    agent = await scripted_agent(client, fake_agent, script)
    await started(client, agent)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/cancel")
    assert r.status == 200, r.raw
    assert r.json()["statusMessage"]["parts"] == [{"text": f"bye{STAND_IN}"}]
    assert r.json()["lastSeq"] == 2


# ---- depth --------------------------------------------------------------------------------


def test_json_depth_ignores_brackets_inside_strings() -> None:
    assert json_depth(b'{"a": "[[[{{{", "b": [1, {"c": "]]]"}]}') == 3
    assert json_depth(b'"\\"[[["') == 0


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5000])
async def test_caller_body_nested_too_deep_is_422_on_every_body_route(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, depth: int
) -> None:
    script = Scripted()
    agent = await scripted_agent(client, fake_agent, script)
    await started(client, agent)
    before = await counts(db)
    arrays = b"[" * depth + b'"x"' + b"]" * depth
    deep = b'{"text": "hi", "metadata": {"k": ' + arrays + b"}}"
    registration = b'{"name": "n", "endpointUrl": "http://127.0.0.1:9/", "protocolVersion": "1.0"'
    json = {"Content-Type": "application/json"}
    for method, path, body in [
        ("POST", "/v1/a2a/agents", registration + b', "x": ' + arrays + b"}"),
        ("PATCH", f"/v1/a2a/agents/{agent}", b'{"name": ' + arrays + b"}"),
        ("POST", f"/v1/a2a/{agent}/messages", deep),
        ("POST", f"/v1/a2a/{agent}/tasks/T1/messages", deep),
        ("POST", f"/v1/a2a/{agent}/tasks/T1/cancel", arrays),
    ]:
        r = await client.call(method, path, data=body, headers=json)
        problem = assert_problem(r, 422)
        assert "deeper" in problem["detail"]
    assert await counts(db) == before
    assert len(script.sent) == 1


async def test_agent_answer_nested_too_deep_is_502_and_a_failed_follow_up(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    def deep(request: JSON) -> JSON:
        answer = task_v10("T1", "completed")
        answer["task"]["metadata"] = {"k": nested(MAX_JSON_DEPTH + 10)}
        return answer

    script = Scripted(follow_up=deep)
    agent = await scripted_agent(client, fake_agent, script)
    await started(client, agent)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "x"})
    assert "deeper" in assert_problem(r, 502)["detail"]
    logged = (await client.call("GET", f"/v1/a2a/{agent}/tasks/T1/events")).json()["events"]
    assert [e["type"] for e in logged] == ["task_created", "task_continue_failed"]
    assert logged[-1]["data"]["reason"] == "agent-bad-answer"


async def test_agent_start_answer_nested_too_deep_is_502(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted(start=lambda r: {"task": nested(MAX_JSON_DEPTH + 10)})
    agent = await scripted_agent(client, fake_agent, script)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "x"})
    assert_problem(r, 502)
    assert (await counts(db))[1:] == (0, 0)


# ---- agent-chosen ids longer than the store keeps ----------------------------------------

LONG = "x" * 501


@pytest.mark.parametrize(
    "answer",
    [
        task_v10(LONG, "working"),
        task_v10("T1", "working", context_id=LONG),
        task_v10("", "working"),
    ],
    ids=["task-id", "context-id", "empty-task-id"],
)
async def test_start_answered_with_an_id_the_store_cannot_keep_is_502(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, answer: JSON
) -> None:
    agent = await scripted_agent(client, fake_agent, Scripted(start=lambda r: answer))
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "x"})
    assert "characters" in assert_problem(r, 502)["detail"]
    assert (await counts(db))[1:] == (0, 0)


@pytest.mark.parametrize(
    "answer",
    [task_v10(LONG, "working"), task_v10("T1", "working", context_id=LONG)],
    ids=["task-id", "context-id"],
)
async def test_follow_up_answered_with_an_id_the_store_cannot_keep_is_502_and_recorded(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, answer: JSON
) -> None:
    agent = await scripted_agent(client, fake_agent, Scripted(follow_up=lambda r: answer))
    await started(client, agent)
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "x"})
    assert "characters" in assert_problem(r, 502)["detail"]
    logged = (await client.call("GET", f"/v1/a2a/{agent}/tasks/T1/events")).json()["events"]
    assert [e["type"] for e in logged] == ["task_created", "task_continue_failed"]
    claim = await db.fetchval(f"SELECT token FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T1'")
    assert claim is None


# ---- credential headers -------------------------------------------------------------------

BAD_HEADERS = {
    "cr-in-value": {"type": "headers", "headers": {"X-Key": "a\rb"}},
    "lf-in-value": {"type": "headers", "headers": {"X-Key": "a\nX-Evil: 1"}},
    "control-in-value": {"type": "headers", "headers": {"X-Key": "a\x01b"}},
    "space-in-name": {"type": "headers", "headers": {"X Key": "v"}},
    "colon-in-name": {"type": "headers", "headers": {"X-Key:": "v"}},
    "lf-in-name": {"type": "headers", "headers": {"X-Key\n": "v"}},
    "non-ascii-name": {"type": "headers", "headers": {"X-Schlüssel": "v"}},
    "framing-name": {"type": "headers", "headers": {"Content-Length": "0"}},
    "crlf-in-bearer": {"type": "bearer", "token": "t\r\nX-Evil: 1"},
}


@pytest.mark.parametrize("auth", sorted(BAD_HEADERS))
async def test_credential_headers_aiohttp_would_refuse_are_422(
    client: Client, db: asyncpg.Connection, auth: str
) -> None:
    body = {"name": "n", "endpointUrl": "http://127.0.0.1:9/", "protocolVersion": "1.0"}
    r = await client.call("POST", "/v1/a2a/agents", {**body, "auth": BAD_HEADERS[auth]})
    assert assert_problem(r, 422)["errors"][0]["loc"].startswith("$.auth")
    agent = await register(client, "http://127.0.0.1:9/")
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent}", {"auth": BAD_HEADERS[auth]})
    assert_problem(r, 422)
    assert await db.fetchval("SELECT auth_type FROM a2a_agents") == "none"


async def test_credential_headers_that_can_be_sent_are_accepted(
    client: Client, fake_agent: StartFake
) -> None:
    fake = await fake_agent(Scripted())
    auth = {"type": "headers", "headers": {"X-Api-Key": "k\tv ~!", "Authorization": "Token x"}}
    agent = await register(client, fake.url, auth=auth)
    await started(client, agent)
    assert fake.headers[-1]["X-Api-Key"] == "k\tv ~!"


# ---- slow bodies --------------------------------------------------------------------------


async def test_body_shorter_than_its_content_length_is_408_and_the_connection_closed(
    settings: Settings, db: asyncpg.Connection
) -> None:
    quick = msgspec.structs.replace(settings, body_timeout_s=0.3)
    bearer = mint_token(JWT_SECRET, "alice@example.com")
    async with serve_asgi(create_app(quick)) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/a2a/agents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {bearer}\r\nContent-Length: 100\r\n\r\n".encode()
            + b'{"name": '
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    assert b"connection: close" in head.lower()
    assert msgspec.json.decode(body)["type"].endswith(":body-timeout")
    assert await counts(db) == (0, 0, 0)
