"""What a start may name (core/tasks/contexts, core/turns/invoke): a context of a task the
caller can see or one new to the agent, and referenced tasks the caller can see; anything else
is the 404 of a task the caller cannot see, and the agent is never called."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from a2a_continue.core.access.callers import Caller
from a2a_continue.core.tasks.contexts import JOIN_CONTEXT, join_context
from a2a_continue.errors import NotFound
from tests.support.client import Client, Response, assert_problem, register, token
from tests.support.database import direct_url
from tests.support.fakes import StartFake, rpc_result
from tests.support.sdk_agent import SdkAgent
from tests.support.waiting import eventually

JSON = dict[str, Any]

ALICE, BOB = "alice@example.com", "bob@example.com"
VERSIONS = ["1.0", "0.3"]


def start_path(agent: str) -> str:
    return f"/v1/a2a/{agent}/messages"


def in_context(context_id: str, **message: Any) -> JSON:
    return {"message": {"contextId": context_id, "parts": [{"text": "weather?"}], **message}}


def task_of(r: Response) -> JSON:
    assert r.status == 200, r.raw
    result: JSON = r.json()["result"]
    return result.get("task", result)


async def public_agent(client: Client, sdk: SdkAgent, version: str) -> str:
    return await register(client, sdk.url, version, visibility="public")


async def tasks_of(db: asyncpg.Connection, owner: str) -> int:
    return int(await db.fetchval("SELECT count(*) FROM a2a_tasks WHERE owner = $1", owner))


def assert_not_found_for_anyone(r: Response) -> None:
    problem = assert_problem(r, 404)
    assert ALICE not in r.raw.decode()
    assert "alice" not in problem["detail"]


# ---- contexts ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_start_refuses_the_context_of_another_callers_task(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent, version: str
) -> None:
    agent = await public_agent(client, sdk, version)
    alices = task_of(await client.call("POST", start_path(agent), {"text": "weather?"}))
    calls = len(sdk.received)

    r = await client.as_(token(BOB)).call(
        "POST", start_path(agent), in_context(alices["contextId"])
    )

    assert_not_found_for_anyone(r)
    assert len(sdk.received) == calls
    assert await tasks_of(db, BOB) == 0


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_start_joins_the_context_of_the_callers_own_task(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent = await public_agent(client, sdk, version)
    first = task_of(await client.call("POST", start_path(agent), {"text": "weather?"}))

    second = task_of(await client.call("POST", start_path(agent), in_context(first["contextId"])))

    assert sdk.received[-1]["params"]["message"]["contextId"] == first["contextId"]
    assert second["contextId"] == first["contextId"]
    assert second["id"] != first["id"]


async def test_a_start_joins_the_context_of_a_task_of_the_callers_team(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent
) -> None:
    agent = await public_agent(client, sdk, "1.0")
    alice = client.as_(token(ALICE, teams=["red"]))
    body = {"text": "weather?", "teamId": "red"}
    team_task = task_of(await alice.call("POST", start_path(agent), body))
    carol = client.as_(token("carol@example.com", teams=["red"]))
    dave = client.as_(token("dave@example.com", teams=["blue"]))

    joined = await carol.call("POST", start_path(agent), in_context(team_task["contextId"]))
    refused = await dave.call("POST", start_path(agent), in_context(team_task["contextId"]))

    assert task_of(joined)["contextId"] == team_task["contextId"]
    assert_not_found_for_anyone(refused)
    assert await tasks_of(db, "dave@example.com") == 0


async def test_an_admin_may_join_any_context(client: Client, sdk: SdkAgent) -> None:
    agent = await public_agent(client, sdk, "1.0")
    alices = task_of(await client.call("POST", start_path(agent), {"text": "weather?"}))
    admin = client.as_(token("root@example.com", admin=True))

    r = await admin.call("POST", start_path(agent), in_context(alices["contextId"]))

    assert task_of(r)["contextId"] == alices["contextId"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_start_may_name_a_context_new_to_the_agent_which_is_then_the_callers(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent, version: str
) -> None:
    agent = await public_agent(client, sdk, version)

    first = task_of(await client.call("POST", start_path(agent), in_context("ctx-new")))
    again = await client.call("POST", start_path(agent), in_context("ctx-new"))
    bobs = await client.as_(token(BOB)).call("POST", start_path(agent), in_context("ctx-new"))

    assert first["contextId"] == "ctx-new"
    assert task_of(again)["contextId"] == "ctx-new"
    assert_not_found_for_anyone(bobs)
    named = await db.fetch("SELECT owner, team_id FROM a2a_contexts")
    assert [tuple(row) for row in named] == [(ALICE, None)]


async def test_a_context_named_by_a_start_that_started_no_task_stays_the_callers(
    client: Client, fake_agent: StartFake
) -> None:
    async def says_hello(request: JSON) -> JSON:
        message = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hello"}]}
        return rpc_result(request, {"message": message})

    fake = await fake_agent(says_hello)
    agent = await register(client, fake.url, visibility="public")
    told = await client.call("POST", start_path(agent), in_context("ctx-chat"))

    r = await client.as_(token(BOB)).call("POST", start_path(agent), in_context("ctx-chat"))

    assert "message" in told.json()["result"]
    assert_not_found_for_anyone(r)
    assert len(fake.received) == 1


async def test_a_context_is_told_apart_per_agent(client: Client, sdk: SdkAgent) -> None:
    one = await public_agent(client, sdk, "1.0")
    other = await public_agent(client, sdk, "1.0")
    task_of(await client.call("POST", start_path(one), in_context("ctx-shared-name")))

    r = await client.as_(token(BOB)).call("POST", start_path(other), in_context("ctx-shared-name"))

    assert task_of(r)["contextId"] == "ctx-shared-name"


async def test_callers_naming_one_new_context_at_once_leave_it_to_exactly_one(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent
) -> None:
    agent = await public_agent(client, sdk, "1.0")
    callers = [client.as_(token(f"caller-{n}@example.com")) for n in range(6)]

    answers = await asyncio.gather(
        *(c.call("POST", start_path(agent), in_context("ctx-race")) for c in callers)
    )

    assert sorted(r.status for r in answers) == [200] + [404] * 5
    assert len(sdk.received) == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_contexts") == 1


async def test_a_start_that_loses_the_race_for_a_new_context_is_refused(
    db: asyncpg.Connection, database_url: str
) -> None:
    """The naming a racing start made after this start's snapshot still decides: the insert
    waits for it, does nothing, and the look that follows sees whose it is."""
    agent_id = uuid.uuid4()
    await db.execute(
        "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner, visibility)"
        " VALUES ($1, 'weather', 'http://127.0.0.1:9/', '1.0', $2, 'public')",
        agent_id,
        ALICE,
    )
    alice = await asyncpg.connect(direct_url(database_url))
    bob = await asyncpg.connect(direct_url(database_url))
    try:
        async with alice.transaction():
            await alice.fetchrow(JOIN_CONTEXT, ALICE, [], False, agent_id, "ctx-race", None)
            bobs = asyncio.ensure_future(
                join_context(bob, Caller(sub=BOB), agent_id, "ctx-race", None)
            )
            await eventually(
                lambda: db.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%INSERT INTO a2a_contexts%'"
                ),
                "bob's naming waits for alice's",
            )
        with pytest.raises(NotFound):
            await bobs
    finally:
        await alice.close()
        await bob.close()
    named = await db.fetch("SELECT owner FROM a2a_contexts")
    assert [row["owner"] for row in named] == [ALICE]


async def test_a_streamed_start_refuses_the_context_of_another_callers_task(
    client: Client, sdk: SdkAgent
) -> None:
    agent = await public_agent(client, sdk, "1.0")
    alices = task_of(await client.call("POST", start_path(agent), {"text": "weather?"}))
    calls = len(sdk.received)

    r = await client.as_(token(BOB)).call(
        "POST",
        start_path(agent),
        in_context(alices["contextId"]),
        headers={"Accept": "text/event-stream"},
    )

    assert_not_found_for_anyone(r)
    assert len(sdk.received) == calls


# ---- referenced tasks ----------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_start_refuses_reference_task_ids_the_caller_cannot_see(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent, version: str
) -> None:
    agent = await public_agent(client, sdk, version)
    alices = task_of(await client.call("POST", start_path(agent), {"text": "weather?"}))
    bob = client.as_(token(BOB))
    bobs = task_of(await bob.call("POST", start_path(agent), {"text": "weather?"}))
    calls = len(sdk.received)

    for refs in ([alices["id"]], [bobs["id"], alices["id"]], ["never-started"]):
        body = {"message": {"parts": [{"text": "as before"}], "referenceTaskIds": refs}}
        r = await bob.call("POST", start_path(agent), body)
        assert_not_found_for_anyone(r)
        assert refs[-1] in r.json()["detail"]

    assert len(sdk.received) == calls
    assert await tasks_of(db, BOB) == 1


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_start_passes_on_references_to_tasks_the_caller_can_see(
    client: Client, sdk: SdkAgent, version: str
) -> None:
    agent = await public_agent(client, sdk, version)
    mine = task_of(await client.call("POST", start_path(agent), {"text": "weather?"}))
    body = {"message": {"parts": [{"text": "as before"}], "referenceTaskIds": [mine["id"]]}}

    task_of(await client.call("POST", start_path(agent), body))

    assert sdk.received[-1]["params"]["message"]["referenceTaskIds"] == [mine["id"]]


async def test_a_follow_up_refuses_reference_task_ids_the_caller_cannot_see(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent
) -> None:
    agent = await public_agent(client, sdk, "1.0")
    alices = task_of(await client.call("POST", start_path(agent), {"text": "weather?"}))
    bob = client.as_(token(BOB))
    bobs = task_of(await bob.call("POST", start_path(agent), {"text": "weather?"}))
    calls = len(sdk.received)
    body = {"message": {"parts": [{"text": "Paris"}], "referenceTaskIds": [alices["id"]]}}

    r = await bob.call("POST", f"/v1/a2a/{agent}/tasks/{bobs['id']}/messages", body)

    assert_not_found_for_anyone(r)
    assert len(sdk.received) == calls
    events = await db.fetchval("SELECT count(*) FROM a2a_task_events e JOIN a2a_tasks t"
                               " ON t.id = e.task WHERE t.owner = $1", BOB)  # fmt: skip
    assert events == 1
