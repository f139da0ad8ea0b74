"""The follow-up route (SPEC §5): the contract, against real SDK agents and scripted fakes.

Most rules run against four agents: the a2a-sdk agent registered as 1.0 and as 0.3, and the
project's own scripted weather agent in each version. Rules that need an agent to misbehave
on purpose (no contextId, exact bytes, another task id, a held answer) use a scripted fake.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.agents import (
    BUSY_TYPE,
    TERMINAL_TYPE,
    Agent,
    events,
    footprint,
    register,
    register_fake,
    start,
)
from tests.support.client import Client, assert_problem, token
from tests.support.database import TASKS_WITH_CLAIMS
from tests.support.fakes import StartFake, WeatherFake, rpc_result, task_body
from tests.support.queries import quiet, request_statements
from tests.support.sdk_agent import run_sdk_agent
from tests.support.servers import serve_asgi

JSON = dict[str, Any]

ALICE = "alice@example.com"
BOB = "bob@example.com"
KINDS = ["sdk-1.0", "sdk-0.3", "fake-1.0", "fake-0.3"]
USER_ROLE = {"1.0": "ROLE_USER", "0.3": "user"}

# The same three parts in each version's shape.
PARTS = {
    "0.3": [
        {"kind": "text", "text": "Paris"},
        {"kind": "data", "data": {"zip": "75001"}},
        {
            "kind": "file",
            "file": {
                "uri": "https://example.com/map.png",
                "mimeType": "image/png",
                "name": "map.png",
            },
        },
    ],
    "1.0": [
        {"text": "Paris"},
        {"data": {"zip": "75001"}},
        {"url": "https://example.com/map.png", "mediaType": "image/png", "filename": "map.png"},
    ],
}
OTHER_VERSION = {"0.3": "1.0", "1.0": "0.3"}


# ---- the project's scripted weather agent -------------------------------------------------


# ---- helpers ------------------------------------------------------------------------------


@pytest.fixture(params=KINDS)
async def agent(request: pytest.FixtureRequest, client: Client, fake_agent: StartFake) -> Any:
    """An agent of each kind, registered with the gateway by alice (a "-contextless" fake
    answers tasks without a contextId)."""
    kind, version, *contextless = request.param.split("-")
    if kind == "sdk":
        async with run_sdk_agent() as sdk:
            yield await register(client, sdk.url, version, sdk.received)
    else:
        fake = WeatherFake(version, with_context=not contextless)
        yield await register_fake(client, fake_agent, fake, version)


# ---- success ------------------------------------------------------------------------------


async def test_continue_forwards_answer_and_records_completion(
    client: Client, db: asyncpg.Connection, agent: Agent
) -> None:
    task = await start(client, agent)
    assert task["state"] == "input-required"

    r = await client.call("POST", agent.messages(task["id"]), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.headers["A2A-Task-State"] == "completed"
    result = r.json()["result"]
    answered = result["task"] if agent.version == "1.0" else result
    assert answered["id"] == task["id"]
    stored = (await client.call("GET", agent.task(task["id"]))).json()
    assert stored["state"] == "completed"
    assert stored["completedAt"] is not None
    assert [p["text"] for a in stored["artifacts"] for p in a["parts"]] == ["Sunny in Paris"]
    assert stored["lastSeq"] == task["lastSeq"] + 1
    logged = await events(client, agent, task["id"])
    assert [(e["seq"], e["type"]) for e in logged] == [(1, "task_created"), (2, "task_continued")]
    continued = logged[-1]
    assert (continued["previousState"], continued["newState"]) == ("input-required", "completed")
    assert continued["actor"] == ALICE
    assert continued["data"] == {"messageId": agent.sent()["messageId"]}


async def test_continue_answers_auth_required_task(client: Client, agent: Agent) -> None:
    task = await start(client, agent, "auth")
    assert task["state"] == "auth-required"

    r = await client.call("POST", agent.messages(task["id"]), {"text": "signed-in"})

    assert r.status == 200, r.raw
    assert r.headers["A2A-Task-State"] == "completed"
    logged = await events(client, agent, task["id"])
    assert (logged[-1]["previousState"], logged[-1]["newState"]) == ("auth-required", "completed")


async def test_continue_passes_configuration_and_metadata(client: Client, agent: Agent) -> None:
    task = await start(client, agent)
    body = {
        "text": "Paris",
        "configuration": {"historyLength": 3, "acceptedOutputModes": ["text/plain"]},
        "metadata": {"trace": "t-1"},
    }

    r = await client.call("POST", agent.messages(task["id"]), body)

    assert r.status == 200, r.raw
    params = agent.received[-1]["params"]
    assert params["configuration"] == {"historyLength": 3, "acceptedOutputModes": ["text/plain"]}
    assert params["metadata"] == {"trace": "t-1"}


async def test_continue_returns_agent_body_byte_for_byte(
    client: Client, fake_agent: StartFake
) -> None:
    answer = b""

    async def handler(request: JSON) -> Any:
        nonlocal answer
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
        answer = (
            b'{ "jsonrpc" : "2.0",\n  "id":"%s" , "result": {"task": {"id": "T1",'
            b' "contextId":"C1","status":{"state":"TASK_STATE_COMPLETED"} ,'
            b' "artifacts": [ {"artifactId":"x","parts":[{"text":"caf\\u00e9"}]} ] } } }\n'
        ) % request["id"].encode()
        return answer

    agent = await register_fake(client, fake_agent, handler)
    await start(client, agent)

    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert r.raw == answer
    assert r.headers["A2A-Task-State"] == "completed"
    stored = (await client.call("GET", agent.task("T1"))).json()
    assert stored["state"] == "completed"
    assert stored["artifacts"] == [{"artifactId": "x", "parts": [{"text": "café"}]}]


async def test_continue_event_takes_the_next_seq(client: Client, fake_agent: StartFake) -> None:
    async def ask_again(request: JSON) -> JSON:
        return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))

    agent = await register_fake(client, fake_agent, ask_again)
    await start(client, agent)

    for text in ("Paris", "France", "Europe"):
        r = await client.call("POST", agent.messages("T1"), {"text": text})
        assert r.status == 200, r.raw

    assert [e["seq"] for e in await events(client, agent, "T1")] == [1, 2, 3, 4]
    assert (await client.call("GET", agent.task("T1"))).json()["lastSeq"] == 4


async def test_continue_keeps_state_when_agent_answers_with_message(
    client: Client, fake_agent: StartFake
) -> None:
    async def handler(request: JSON) -> JSON:
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
        reply = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "Noted"}]}
        return rpc_result(request, {"message": reply})

    agent = await register_fake(client, fake_agent, handler)
    await start(client, agent)

    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert r.json()["result"]["message"]["parts"] == [{"text": "Noted"}]
    assert r.headers["A2A-Task-State"] == "input-required"
    continued = (await events(client, agent, "T1"))[-1]
    assert continued["type"] == "task_continued"
    assert continued["previousState"] == continued["newState"] == "input-required"


# ---- the fields the gateway owns ----------------------------------------------------------


async def test_continue_sends_gateway_owned_fields_and_never_the_client_message_id(
    client: Client, agent: Agent
) -> None:
    task = await start(client, agent)
    message = {
        "messageId": "client-chosen-id",
        "role": "user",
        "taskId": task["id"],
        "contextId": task["contextId"],
        "parts": PARTS[OTHER_VERSION[agent.version]],
    }

    r = await client.call("POST", agent.messages(task["id"]), {"message": message})

    assert r.status == 200, r.raw
    sent = agent.sent()
    assert sent["messageId"] != "client-chosen-id"
    uuid.UUID(sent["messageId"])
    assert sent["role"] == USER_ROLE[agent.version]
    assert (sent["taskId"], sent["contextId"]) == (task["id"], task["contextId"])
    assert sent["parts"] == PARTS[agent.version]
    assert ("kind" in sent) == (agent.version == "0.3")
    continued = (await events(client, agent, task["id"]))[-1]
    assert continued["data"]["messageId"] == sent["messageId"]


async def test_continue_accepts_equal_task_id(client: Client, agent: Agent) -> None:
    task = await start(client, agent)
    message = {"taskId": task["id"], "parts": [{"text": "Paris"}]}

    r = await client.call("POST", agent.messages(task["id"]), {"message": message})

    assert r.status == 200, r.raw
    assert agent.sent()["taskId"] == task["id"]


async def test_continue_accepts_equal_context_id(client: Client, agent: Agent) -> None:
    task = await start(client, agent)
    message = {"contextId": task["contextId"], "parts": [{"text": "Paris"}]}

    r = await client.call("POST", agent.messages(task["id"]), {"message": message})

    assert r.status == 200, r.raw
    assert agent.sent()["contextId"] == task["contextId"]


# A client taskId or contextId other than the task's, or any contextId on a task that has
# none: (the agent, the member sent, the detail's words). A contextless agent stores no
# contextId, so only that detail can name the reason.
FOREIGN_IDS = [
    *[(kind, {"taskId": "another-task"}, "another-task") for kind in KINDS],
    *[(kind, {"contextId": "another-context"}, "another-context") for kind in KINDS],
    *[
        (f"fake-{v}-contextless", {"contextId": "any-context"}, "has no contextId")
        for v in ("1.0", "0.3")
    ],
]


@pytest.mark.parametrize(("agent", "sent", "named"), FOREIGN_IDS, indirect=["agent"])
async def test_continue_refuses_a_task_id_or_context_id_the_task_does_not_have(
    client: Client, db: asyncpg.Connection, agent: Agent, sent: JSON, named: str
) -> None:
    task = await start(client, agent)
    before = await footprint(db, agent)
    message = {**sent, "parts": [{"text": "Paris"}]}

    r = await client.call("POST", agent.messages(task["id"]), {"message": message})

    assert named in assert_problem(r, 400)["detail"]
    assert await footprint(db, agent) == before


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_continue_sends_no_context_id_on_task_without_one(
    client: Client, fake_agent: StartFake, version: str
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake(version, False), version)
    task = await start(client, agent)

    r = await client.call("POST", agent.messages(task["id"]), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert "contextId" not in agent.sent()
    assert agent.sent()["taskId"] == task["id"]


@pytest.mark.parametrize("role", ["user", "ROLE_USER"])
async def test_continue_accepts_user_role_in_either_spelling(
    client: Client, agent: Agent, role: str
) -> None:
    task = await start(client, agent)
    message = {"role": role, "parts": [{"text": "Paris"}]}

    r = await client.call("POST", agent.messages(task["id"]), {"message": message})

    assert r.status == 200, r.raw
    assert agent.sent()["role"] == USER_ROLE[agent.version]


async def test_continue_rejects_any_role_but_user(
    client: Client, db: asyncpg.Connection, agent: Agent
) -> None:
    task = await start(client, agent)
    before = await footprint(db, agent)

    for role in ("agent", "ROLE_AGENT", "ROLE_UNSPECIFIED", "User"):
        message = {"role": role, "parts": [{"text": "Paris"}]}
        r = await client.call("POST", agent.messages(task["id"]), {"message": message})

        assert role in assert_problem(r, 400)["detail"]
        assert await footprint(db, agent) == before


# ---- terminal, in flight, JSON-RPC errors -------------------------------------------------


@pytest.mark.parametrize(
    ("first", "state"), [("now", "completed"), ("fail", "failed"), ("cancel", "canceled")]
)
async def test_continue_refuses_terminal_task_naming_its_state(
    client: Client, db: asyncpg.Connection, agent: Agent, first: str, state: str
) -> None:
    task = await start(client, agent, "weather?" if first == "cancel" else first)
    if first == "cancel":
        r = await client.call("POST", agent.task(task["id"]) + "/cancel")
        assert r.status == 200, r.raw
    before = await footprint(db, agent)

    r = await client.call("POST", agent.messages(task["id"]), {"text": "Paris"})

    problem = assert_problem(r, 409)
    assert problem["type"] == TERMINAL_TYPE
    assert problem["state"] == state
    assert state in problem["detail"]
    assert await footprint(db, agent) == before


async def test_continue_refuses_second_follow_up_while_first_is_in_flight(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    arrived, release = asyncio.Event(), asyncio.Event()

    async def held(request: JSON) -> JSON:
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
        arrived.set()
        await release.wait()
        return rpc_result(request, task_body("1.0", "T1", "completed", "C1"))

    agent = await register_fake(client, fake_agent, held)
    await start(client, agent)
    first = asyncio.create_task(client.call("POST", agent.messages("T1"), {"text": "Paris"}))
    try:
        await arrived.wait()
        before = await footprint(db, agent)

        r = await client.call("POST", agent.messages("T1"), {"text": "Rome"})

        problem = assert_problem(r, 409)
        assert problem["type"] == BUSY_TYPE != TERMINAL_TYPE
        assert await footprint(db, agent) == before
    finally:
        release.set()
        answered = await first
    assert answered.status == 200, answered.raw
    assert [e["type"] for e in await events(client, agent, "T1")] == [
        "task_created",
        "task_continued",
    ]


async def test_continue_refused_as_busy_says_when_to_retry(
    client: Client, fake_agent: StartFake
) -> None:
    arrived, release = asyncio.Event(), asyncio.Event()

    async def held(request: JSON) -> JSON:
        if "taskId" in request["params"]["message"]:
            arrived.set()
            await release.wait()
        return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))

    agent = await register_fake(client, fake_agent, held)
    await start(client, agent)
    first = asyncio.create_task(client.call("POST", agent.messages("T1"), {"text": "Paris"}))
    try:
        await arrived.wait()
        blocking = await client.call("POST", agent.messages("T1"), {"text": "Rome"})
        streamed = await client.call(
            "POST",
            agent.messages("T1"),
            {"text": "Rome"},
            headers={"Accept": "text/event-stream"},
        )
    finally:
        release.set()
        await first

    for r in (blocking, streamed):
        assert assert_problem(r, 409)["type"] == BUSY_TYPE
        assert r.headers["Retry-After"] == "1"


async def test_continue_returns_agent_json_rpc_error_and_keeps_state(
    client: Client, db: asyncpg.Connection, agent: Agent
) -> None:
    # The agent lost the task (say it restarted): it answers -32001 task not found.
    await db.execute(
        """INSERT INTO a2a_tasks (agent_id, task_id, context_id, state, owner)
           VALUES ($1, 'lost-task', 'lost-context', 'input-required', $2)""",
        uuid.UUID(agent.id),
        ALICE,
    )

    r = await client.call("POST", agent.messages("lost-task"), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert r.json()["error"]["code"] == -32001
    assert r.json()["id"] == agent.received[-1]["id"]
    assert r.headers["A2A-Task-State"] == "input-required"
    assert (await client.call("GET", agent.task("lost-task"))).json()["state"] == "input-required"
    [continued] = await events(client, agent, "lost-task")
    assert continued["type"] == "task_continued"
    assert continued["previousState"] == continued["newState"] == "input-required"
    assert continued["data"] == {
        "messageId": agent.sent()["messageId"],
        "error": {"code": -32001},
    }


async def test_continue_returns_agent_error_body_byte_for_byte(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    answer = b""

    async def handler(request: JSON) -> Any:
        nonlocal answer
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
        answer = (
            b'{"jsonrpc":"2.0" ,  "error" : {"code":-32004, "message" : "not now"},'
            b' "id" : "%s"}' % request["id"].encode()
        )
        return answer

    agent = await register_fake(client, fake_agent, handler)
    await start(client, agent)

    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert r.raw == answer
    assert r.headers["A2A-Task-State"] == "input-required"
    row = await db.fetchrow(
        f"SELECT state, token AS claim_token FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T1'"
    )
    assert row is not None
    assert (row["state"], row["claim_token"]) == ("input-required", None)
    assert (await events(client, agent, "T1"))[-1]["data"]["error"] == {"code": -32004}


# ---- visibility and permission ------------------------------------------------------------


async def test_continue_hides_another_users_task(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"), visibility="public")
    task = await start(client, agent)
    before = await footprint(db, agent)

    r = await client.as_(token(BOB)).call("POST", agent.messages(task["id"]), {"text": "Paris"})

    assert_problem(r, 404)
    assert await footprint(db, agent) == before


async def test_continue_lets_an_admin_continue_another_users_task(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    admin = client.as_(token("root@example.com", admin=True))

    r = await admin.call("POST", agent.messages(task["id"]), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert (await events(client, agent, task["id"]))[-1]["actor"] == "root@example.com"


async def test_continue_lets_a_team_member_continue_a_team_task(
    client: Client, fake_agent: StartFake
) -> None:
    alice = client.as_(token(ALICE, teams=["blue"]))
    agent = await register_fake(alice, fake_agent, WeatherFake("1.0"), visibility="public")
    task = await start(alice, agent, teamId="blue")
    bob = client.as_(token(BOB, teams=["blue"]))

    r = await bob.call("POST", agent.messages(task["id"]), {"text": "Paris"})

    assert r.status == 200, r.raw


async def test_continue_hides_task_of_an_agent_no_longer_visible(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    # Bob's team agent; alice, in the team, starts a task, then leaves the team.
    bob = client.as_(token(BOB, teams=["blue"]))
    agent = await register_fake(
        bob, fake_agent, WeatherFake("1.0"), visibility="team", teamId="blue"
    )
    task = await start(client.as_(token(ALICE, teams=["blue"])), agent)
    before = await footprint(db, agent)

    r = await client.call("POST", agent.messages(task["id"]), {"text": "Paris"})

    assert_problem(r, 404)
    assert await footprint(db, agent) == before


async def test_continue_answers_404_for_unknown_task(
    client: Client, db: asyncpg.Connection, agent: Agent
) -> None:
    await start(client, agent)
    before = await footprint(db, agent)

    r = await client.call("POST", agent.messages("no-such-task"), {"text": "Paris"})

    assert_problem(r, 404)
    assert await footprint(db, agent) == before


@pytest.mark.parametrize("agent_id", [str(uuid.uuid4()), "not-a-uuid"])
async def test_continue_answers_404_for_unknown_or_malformed_agent_id(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, agent_id: str
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    before = await footprint(db, agent)

    path = f"/v1/a2a/{agent_id}/tasks/{task['id']}/messages"
    r = await client.call("POST", path, {"text": "Paris"})

    assert_problem(r, 404)
    assert await footprint(db, agent) == before


async def test_continue_requires_the_invoke_permission(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    before = await footprint(db, agent)
    reader = client.as_(token(ALICE, ["a2a.read", "a2a.create"]))

    r = await reader.call("POST", agent.messages(task["id"]), {"text": "Paris"})

    assert "a2a.invoke" in assert_problem(r, 403)["detail"]
    assert await footprint(db, agent) == before


async def test_continue_needs_only_the_invoke_permission(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)

    r = await client.as_(token(ALICE, ["a2a.invoke"])).call(
        "POST", agent.messages(task["id"]), {"text": "Paris"}
    )

    assert r.status == 200, r.raw


# ---- the body -----------------------------------------------------------------------------

FILE = {"uri": "https://example.com/a.png"}
INVALID_BODIES = {
    "not-json": (b"{text: Paris", "$"),
    "json-not-object": (b'["Paris"]', "$"),
    "message-and-text": ({"text": "Paris", "message": {"parts": [{"text": "Paris"}]}}, "$"),
    "neither": ({"metadata": {"a": 1}}, "$"),
    "empty-parts": ({"message": {"parts": []}}, "$.message.parts"),
    "no-parts": ({"message": {"role": "user"}}, "$.message"),
    "part-without-content": ({"message": {"parts": [{"kind": "text"}]}}, "$.message.parts[0]"),
    "part-with-two-contents": (
        {"message": {"parts": [{"text": "a"}, {"text": "b", "data": {}}]}},
        "$.message.parts[1]",
    ),
    "part-kind-mismatch": (
        {"message": {"parts": [{"kind": "data", "text": "a"}]}},
        "$.message.parts[0]",
    ),
    "file-with-bytes-and-uri": (
        {"message": {"parts": [{"kind": "file", "file": {**FILE, "bytes": "AA=="}}]}},
        "$.message.parts[0]",
    ),
    "unknown-part-kind": (
        {"message": {"parts": [{"kind": "video", "text": "a"}]}},
        "$.message.parts[0].kind",
    ),
    "text-not-string": ({"text": 5}, "$.text"),
    "empty-text": ({"text": ""}, "$.text"),
    "task-id-not-string": (
        {"message": {"taskId": 5, "parts": [{"text": "a"}]}},
        "$.message.taskId",
    ),
    "history-length-not-int": (
        {"text": "a", "configuration": {"historyLength": "3"}},
        "$.configuration.historyLength",
    ),
    "metadata-not-object": ({"text": "a", "metadata": [1]}, "$.metadata"),
    "unknown-field": ({"text": "a", "priority": "high"}, "$"),
}


@pytest.mark.parametrize(("body", "loc"), INVALID_BODIES.values(), ids=INVALID_BODIES.keys())
async def test_continue_refuses_invalid_body_with_located_errors(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, body: Any, loc: str
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    before = await footprint(db, agent)

    raw = body if isinstance(body, bytes) else msgspec.json.encode(body)
    r = await client.call(
        "POST", agent.messages(task["id"]), data=raw, headers={"Content-Type": "application/json"}
    )

    problem = assert_problem(r, 422)
    assert problem["errors"], problem
    assert all(set(e) == {"loc", "msg"} and e["msg"] for e in problem["errors"])
    assert problem["errors"][0]["loc"] == loc
    assert await footprint(db, agent) == before


async def test_continue_with_text_inside_the_message_is_told_where_text_goes(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    before = await footprint(db, agent)

    r = await client.call("POST", agent.messages(task["id"]), {"message": {"text": "Paris"}})

    [error] = assert_problem(r, 422)["errors"]
    assert error["loc"] == "$.message"
    assert '{"parts": [{"text": "hi"}]}' in error["msg"]
    assert '{"text": "hi"}' in error["msg"]
    assert await footprint(db, agent) == before


VALID_PARTS = {
    "text-v10": {"text": "Paris"},
    "text-v03": {"kind": "text", "text": "Paris"},
    "data-v10": {"data": {"city": "Paris"}},
    "data-v03": {"kind": "data", "data": {"city": "Paris"}},
    "file-uri-v03": {"kind": "file", "file": {"uri": "https://example.com/a.png"}},
    "file-bytes-v03": {"file": {"bytes": "AA==", "mimeType": "image/png"}},
    "url-v10": {"url": "https://example.com/a.png", "mediaType": "image/png"},
    "raw-v10": {"raw": "AA==", "filename": "a.png"},
}


@pytest.mark.parametrize("part", VALID_PARTS.values(), ids=VALID_PARTS.keys())
async def test_continue_accepts_message_without_role_or_message_id(
    client: Client, fake_agent: StartFake, part: JSON
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)

    r = await client.call("POST", agent.messages(task["id"]), {"message": {"parts": [part]}})

    assert r.status == 200, r.raw
    assert len(agent.sent()["parts"]) == 1


def body_of_size(size: int) -> bytes:
    frame = b'{"text":"%s"}'
    return frame % (b"x" * (size - len(frame) + 2))


async def chunks(raw: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(raw), 4096):
        yield raw[i : i + 4096]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_continue_refuses_body_over_the_size_limit(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, settings: Settings, framing: str
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    before = await footprint(db, agent)
    raw = body_of_size(settings.max_body_bytes + 1)

    data = raw if framing == "content-length" else chunks(raw)
    r = await client.call("POST", agent.messages(task["id"]), data=data)

    assert_problem(r, 413)
    assert await footprint(db, agent) == before


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_continue_accepts_body_at_the_size_limit(
    client: Client, fake_agent: StartFake, settings: Settings, framing: str
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    raw = body_of_size(settings.max_body_bytes)
    assert len(raw) == settings.max_body_bytes

    data = raw if framing == "content-length" else chunks(raw)
    r = await client.call("POST", agent.messages(task["id"]), data=data)

    assert r.status == 200, r.raw


# ---- an agent that answers with another task ----------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_continue_records_redirected_task_for_the_caller(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, version: str
) -> None:
    async def redirecting(request: JSON) -> JSON:
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body(version, "T1", "input-required", "C1"))
        return rpc_result(request, task_body(version, "T2", "working", "C1"))

    alice = client.as_(token(ALICE, teams=["blue"]))
    agent = await register_fake(alice, fake_agent, redirecting, version)
    await start(alice, agent, teamId="blue")

    r = await alice.call("POST", agent.messages("T1"), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert r.headers["A2A-Task-State"] == "working"  # the state of the task it answered with
    message_id = agent.sent()["messageId"]
    new = (await alice.call("GET", agent.task("T2"))).json()
    assert (new["owner"], new["teamId"], new["state"]) == (ALICE, "blue", "working")
    [created] = await events(alice, agent, "T2")
    assert created["type"] == "task_created"
    assert created["data"] == {"messageId": message_id, "redirectedFrom": "T1"}
    original = (await alice.call("GET", agent.task("T1"))).json()
    assert original["state"] == "input-required"
    redirected = (await events(alice, agent, "T1"))[-1]
    assert (redirected["seq"], redirected["type"]) == (2, "task_redirected")
    assert redirected["data"] == {"messageId": message_id, "redirectedTo": "T2"}
    assert redirected["previousState"] == redirected["newState"] == "input-required"
    claim = await db.fetchrow(
        "SELECT token AS claim_token, expires_at AS claim_expires_at"
        f" FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T1'"
    )
    assert claim is not None
    assert tuple(claim) == (None, None)


# ---- round trips --------------------------------------------------------------------------


async def test_continue_happy_path_takes_two_statements_claim_then_outcome_with_event(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    queries: list[str] = []
    app = create_app(quiet(settings), on_query=lambda record: queries.append(record.query))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
        warm_up = await start(client, agent)
        r = await client.call("POST", agent.messages(warm_up["id"]), {"text": "Paris"})
        assert r.status == 200, r.raw
        task = await start(client, agent)

        queries.clear()
        r = await client.call("POST", agent.messages(task["id"]), {"text": "Rome"})
        counted = request_statements(queries)

    assert r.status == 200, r.raw
    assert len(counted) == 2, [q[:200] for q in counted]
