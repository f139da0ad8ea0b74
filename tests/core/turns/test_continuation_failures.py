"""The follow-up route when something else fails: the database, the agent, the event log."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.agents import Agent, events, register, register_fake, start
from tests.support.client import Client, assert_problem
from tests.support.database import claim_of
from tests.support.fakes import Flaky, StartFake, rpc_result, task_body
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually

JSON = dict[str, Any]
CLOSED_PORT_URL = "http://127.0.0.1:1/"


async def move_agent(client: Client, agent: Agent, url: str) -> None:
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent.id}", {"endpointUrl": url})
    assert r.status == 200, r.raw


async def assert_failure_recorded(
    client: Client, db: asyncpg.Connection, agent: Agent, reason: str
) -> None:
    """The state is unchanged, a task_continue_failed names the reason, the claim is gone."""
    task = (await client.call("GET", agent.task("T1"))).json()
    assert (task["state"], task["lastSeq"]) == ("input-required", 2)
    failed = (await events(client, agent, "T1"))[-1]
    assert (failed["seq"], failed["type"]) == (2, "task_continue_failed")
    assert failed["previousState"] == failed["newState"] == "input-required"
    assert failed["data"]["reason"] == reason
    uuid.UUID(failed["data"]["messageId"])
    assert await claim_of(db, "T1") == (None, None)


# ---- the database -------------------------------------------------------------------------


async def test_continue_answers_503_with_retry_after_when_database_is_down(
    settings: Settings,
) -> None:
    down = msgspec.structs.replace(settings, database_url="postgresql://postgres@127.0.0.1:1/x")
    async with serve_asgi(create_app(down)) as base, aiohttp.ClientSession() as session:
        r = await Client(base, session).call(
            "POST", f"/v1/a2a/{uuid.uuid4()}/tasks/T1/messages", {"text": "Paris"}
        )

    problem = assert_problem(r, 503)
    assert int(r.headers["Retry-After"]) > 0
    assert problem["type"] == "urn:a2a-continue:problem:database-unavailable"


async def test_continue_looks_the_task_up_when_database_is_up(client: Client) -> None:
    r = await client.call("POST", f"/v1/a2a/{uuid.uuid4()}/tasks/T1/messages", {"text": "Paris"})

    assert_problem(r, 404)


# ---- the agent ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("unreachable", "agent-unreachable"),
        ("http-500", "agent-bad-answer"),
        ("not-json", "agent-bad-answer"),
    ],
)
async def test_continue_answers_502_keeps_state_and_releases_claim(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, mode: str, reason: str
) -> None:
    flaky = Flaky()
    fake = await fake_agent(flaky)
    agent = await register(client, fake.url, "1.0", fake.received)
    await start(client, agent)
    flaky.mode = mode
    if mode == "unreachable":
        r = await client.call(
            "PATCH", f"/v1/a2a/agents/{agent.id}", {"endpointUrl": CLOSED_PORT_URL}
        )
        assert r.status == 200, r.raw

    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})

    problem = assert_problem(r, 502)
    assert problem["type"] == f"urn:a2a-continue:problem:{reason}"
    await assert_failure_recorded(client, db, agent, reason)
    flaky.mode = "answer"
    if mode == "unreachable":
        await move_agent(client, agent, fake.url)
    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})
    assert r.status == 200, r.raw
    assert r.headers["A2A-Task-State"] == "completed"


async def test_continue_answers_504_keeps_state_and_releases_claim(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    flaky = Flaky()
    agent = await register_fake(client, fake_agent, flaky, timeoutSeconds=0.2)
    await start(client, agent)
    flaky.mode = "hold"
    try:
        r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})
    finally:
        flaky.release.set()

    problem = assert_problem(r, 504)
    assert problem["type"] == "urn:a2a-continue:problem:agent-timeout"
    await assert_failure_recorded(client, db, agent, "agent-timeout")
    flaky.mode = "answer"
    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})
    assert r.status == 200, r.raw


# ---- the event log ------------------------------------------------------------------------


@pytest.fixture
async def refusing_continued_events(db: asyncpg.Connection) -> AsyncIterator[None]:
    """Make every insert of a task_continued event fail, for the test's duration."""
    await db.execute(
        """
        CREATE FUNCTION a2ac_test_refuse_continued() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.type = 'task_continued' THEN
                RAISE EXCEPTION 'the event log refuses task_continued';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER a2ac_test_refuse_continued BEFORE INSERT ON a2a_task_events
            FOR EACH ROW EXECUTE FUNCTION a2ac_test_refuse_continued();
        """
    )
    try:
        yield
    finally:
        await drop_refusal(db)


async def drop_refusal(db: asyncpg.Connection) -> None:
    await db.execute(
        "DROP TRIGGER IF EXISTS a2ac_test_refuse_continued ON a2a_task_events;"
        " DROP FUNCTION IF EXISTS a2ac_test_refuse_continued();"
    )


async def test_continue_answers_200_and_stores_state_when_event_write_fails(
    client: Client,
    db: asyncpg.Connection,
    fake_agent: StartFake,
    refusing_continued_events: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def two_steps(request: JSON) -> JSON:
        message = request["params"]["message"]
        state = {None: "input-required", "Paris": "auth-required"}.get(
            message.get("taskId") and message["parts"][0]["text"], "completed"
        )
        return rpc_result(request, task_body("1.0", "T1", state, "C1"))

    agent = await register_fake(client, fake_agent, two_steps)
    await start(client, agent)

    with caplog.at_level(logging.ERROR, logger="a2a_continue.core.turns.continuation"):
        r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert r.headers["A2A-Task-State"] == "auth-required"
    logged = [rec for rec in caplog.records if rec.name == "a2a_continue.core.turns.continuation"]
    assert logged and logged[0].levelno == logging.ERROR
    assert logged[0].exc_info is not None
    assert "refuses task_continued" in str(logged[0].exc_info[1])
    task = (await client.call("GET", agent.task("T1"))).json()
    assert (task["state"], task["lastSeq"]) == ("auth-required", 1)
    assert [e["type"] for e in await events(client, agent, "T1")] == ["task_created"]
    assert await claim_of(db, "T1") == (None, None)

    await drop_refusal(db)
    r = await client.call("POST", agent.messages("T1"), {"text": "signed-in"})

    assert r.status == 200, r.raw
    logged_after = await events(client, agent, "T1")
    assert [(e["seq"], e["type"]) for e in logged_after] == [
        (1, "task_created"),
        (2, "task_continued"),
    ]
    assert (logged_after[1]["previousState"], logged_after[1]["newState"]) == (
        "auth-required",
        "completed",
    )


# ---- the outcome itself -------------------------------------------------------------------


@pytest.fixture
async def refusing_outcomes(db: asyncpg.Connection) -> AsyncIterator[None]:
    """Make every update of a task's state fail (an outcome, with or without its event) until
    the test drops it."""
    await db.execute(
        """
        CREATE FUNCTION a2ac_test_refuse_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'the database refuses outcomes';
        END $$;
        CREATE TRIGGER a2ac_test_refuse_outcome BEFORE UPDATE OF state ON a2a_tasks
            FOR EACH ROW EXECUTE FUNCTION a2ac_test_refuse_outcome();
        """
    )
    try:
        yield
    finally:
        await drop_outcome_refusal(db)


async def drop_outcome_refusal(db: asyncpg.Connection) -> None:
    await db.execute(
        "DROP TRIGGER IF EXISTS a2ac_test_refuse_outcome ON a2a_tasks;"
        " DROP FUNCTION IF EXISTS a2ac_test_refuse_outcome();"
    )


async def test_an_answer_whose_recording_fails_is_recorded_once_the_database_takes_it(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, refusing_outcomes: None
) -> None:
    async def two_steps(request: JSON) -> JSON:
        state = "completed" if request["params"]["message"].get("taskId") else "input-required"
        return rpc_result(request, task_body("1.0", "T1", state, "C1"))

    agent = await register_fake(client, fake_agent, two_steps)
    await start(client, agent)  # a new task is an insert: the refusal does not touch it

    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert r.headers["A2A-Task-State"] == "completed"
    busy = await client.call("POST", agent.messages("T1"), {"text": "again"})
    assert busy.status == 409, busy.raw  # the claim waits for the answer to be recorded
    await drop_outcome_refusal(db)

    async def recorded() -> bool:
        task = (await client.call("GET", agent.task("T1"))).json()
        return bool(task["state"] == "completed")

    await eventually(recorded, "the answer was recorded after the database took it")
    logged = await events(client, agent, "T1")
    assert [(e["seq"], e["type"], e["newState"]) for e in logged] == [
        (1, "task_created", "input-required"),
        (2, "task_continued", "completed"),
    ]
    assert await claim_of(db, "T1") == (None, None)


async def test_an_answer_whose_recording_fails_is_recorded_after_a_failover_emptied_the_claims(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, refusing_outcomes: None
) -> None:
    async def two_steps(request: JSON) -> JSON:
        state = "completed" if request["params"]["message"].get("taskId") else "input-required"
        return rpc_result(request, task_body("1.0", "T1", state, "C1"))

    agent = await register_fake(client, fake_agent, two_steps)
    await start(client, agent)

    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})

    assert r.status == 200, r.raw
    # a2a_claims is unlogged: the standby Patroni promotes starts with none
    await db.execute("TRUNCATE a2a_claims")
    await drop_outcome_refusal(db)

    async def recorded() -> bool:
        task = (await client.call("GET", agent.task("T1"))).json()
        return bool(task["state"] == "completed")

    await eventually(recorded, "the answer was recorded although its claim was lost")
    logged = await events(client, agent, "T1")
    assert [(e["seq"], e["type"], e["newState"]) for e in logged] == [
        (1, "task_created", "input-required"),
        (2, "task_continued", "completed"),
    ]
