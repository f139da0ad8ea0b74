"""Safe retries (SPEC §10): an ``Idempotency-Key`` on start, continue and cancel."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web
from starlette.responses import StreamingResponse

from a2a_continue.app import ROUTES, create_app
from a2a_continue.core.access.callers import Caller
from a2a_continue.core.idempotency.keys import sweep
from a2a_continue.core.idempotency.retries import idempotent, request_hash
from a2a_continue.http.openapi import build_document
from a2a_continue.runtime.db import create_pool
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.secrets import Sealer, decode_key
from a2a_continue.settings import Settings, SettingsError, load_settings
from tests.support.agents import BUSY_TYPE, Agent, events, register, register_fake, start
from tests.support.client import Client, Response, assert_problem, token
from tests.support.database import TASKS_WITH_CLAIMS
from tests.support.fakes import HeldAgent, StartFake, WeatherFake, rpc_error, rpc_result, task_body
from tests.support.metrics import moved, scrape
from tests.support.processes import GatewayProcess, two_gateways
from tests.support.queries import quiet, request_statements
from tests.support.rpc import message_v10
from tests.support.sdk_agent import run_sdk_agent
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually

JSON = dict[str, Any]

ALICE = "alice@example.com"
BOB = "bob@example.com"
PROBLEM = "urn:a2a-continue:problem:"
REUSED = PROBLEM + "idempotency-key-reused"
IN_FLIGHT = PROBLEM + "idempotency-key-in-flight"
STREAMED = PROBLEM + "idempotency-key-streamed"
STREAMING = {"streaming": True}


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


async def key_rows(db: asyncpg.Connection) -> list[asyncpg.Record]:
    return list(await db.fetch("SELECT * FROM a2a_idempotency_keys ORDER BY caller, key"))


def assert_replay_of(first: Response, again: Response) -> None:
    """``again`` is ``first`` replayed: the same status, bytes and headers, marked replayed."""
    assert again.status == first.status, again.raw
    assert again.raw == first.raw
    for name in ("Content-Type", "A2A-Task-State"):
        assert again.headers.get(name) == first.headers.get(name), name
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"


def cancel_path(agent: Agent, task_id: str) -> str:
    return agent.task(task_id) + "/cancel"


def start_path(agent: Agent) -> str:
    return f"/v1/a2a/{agent.id}/messages"


async def task_id_of(r: Response) -> str:
    result = r.json()["result"]
    return str(result["task"]["id"] if "task" in result else result["id"])


class Scripted:
    """A 1.0 agent that starts T1 in input-required and answers follow-ups from a script.

    Each follow-up pops the next step: a coroutine function of the request.
    """

    def __init__(self, *steps: Callable[[JSON], Awaitable[Any]]) -> None:
        self.steps = list(steps)
        self.follow_ups = 0

    async def __call__(self, request: JSON) -> Any:
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
        self.follow_ups += 1
        return await self.steps.pop(0)(request)


async def asks_again(request: JSON) -> JSON:
    return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))


async def completes(request: JSON) -> JSON:
    return rpc_result(request, task_body("1.0", "T1", "completed", "C1"))


async def not_json(request: JSON) -> web.Response:
    return web.Response(body=b"<html>oops</html>", content_type="text/html")


async def too_slow(request: JSON) -> JSON:
    await asyncio.sleep(1.0)
    return await completes(request)


# ---- replays ------------------------------------------------------------------------------


async def test_start_replay_is_byte_identical_without_agent_call_or_event(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    body = {"text": "weather?"}

    first = await client.call("POST", start_path(agent), body, headers=keyed("start-1"))
    again = await client.call("POST", start_path(agent), body, headers=keyed("start-1"))

    assert first.status == 200, first.raw
    assert first.headers["A2A-Task-State"] == "input-required"
    assert_replay_of(first, again)
    assert len(agent.received) == 1
    task_id = await task_id_of(first)
    assert [e["type"] for e in await events(client, agent, task_id)] == ["task_created"]
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 1


async def test_key_row_keeps_route_agent_request_hash_and_answer(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    path = start_path(agent)
    raw = msgspec.json.encode({"text": "weather?"})

    r = await client.call("POST", path, data=raw, headers=keyed("start-1"))

    [row] = await key_rows(db)
    assert (row["caller"], row["key"], row["route"]) == (ALICE, "start-1", "start")
    assert row["agent_id"] == uuid.UUID(agent.id)
    assert (
        bytes(row["request_hash"])
        == hashlib.sha256(b"POST\0" + path.encode() + b"\0" + raw).digest()
    )
    assert (row["status"], row["task_state"]) == (200, "input-required")
    assert row["content_type"] == r.headers["Content-Type"]
    assert bytes(row["body"]) == r.raw
    assert row["locked_until"] is None
    assert row["expires_at"] > row["created_at"]


async def test_continue_replay_is_byte_identical_without_agent_call_or_event(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    path = agent.messages(task["id"])

    first = await client.call("POST", path, {"text": "Paris"}, headers=keyed("k"))
    again = await client.call("POST", path, {"text": "Paris"}, headers=keyed("k"))

    assert first.status == 200, first.raw
    assert first.headers["A2A-Task-State"] == "completed"
    # The task is terminal now: only a replay can still answer 200.
    assert_replay_of(first, again)
    assert len(agent.received) == 2
    logged = await events(client, agent, task["id"])
    assert [e["type"] for e in logged] == ["task_created", "task_continued"]


async def test_continue_replays_an_agent_json_rpc_error(
    client: Client, fake_agent: StartFake
) -> None:
    async def refuses(request: JSON) -> JSON:
        return rpc_error(request, -32004, "not now")

    script = Scripted(refuses, completes)
    agent = await register_fake(client, fake_agent, script)
    await start(client, agent)

    first = await client.call("POST", agent.messages("T1"), {"text": "Paris"}, headers=keyed("k"))
    again = await client.call("POST", agent.messages("T1"), {"text": "Paris"}, headers=keyed("k"))

    assert first.status == 200, first.raw
    assert first.json()["error"]["code"] == -32004
    assert_replay_of(first, again)
    assert script.follow_ups == 1
    assert len(await events(client, agent, "T1")) == 2


async def test_cancel_replay_is_byte_identical_without_agent_call_or_event(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)

    first = await client.call("POST", cancel_path(agent, task["id"]), headers=keyed("c"))
    again = await client.call("POST", cancel_path(agent, task["id"]), headers=keyed("c"))

    assert first.status == 200, first.raw
    assert first.json()["state"] == "canceled"
    assert_replay_of(first, again)
    assert [r["method"] for r in agent.received] == ["SendMessage", "CancelTask"]
    logged = await events(client, agent, task["id"])
    assert [e["type"] for e in logged] == ["task_created", "task_canceled"]


async def test_cancel_refused_by_the_agent_is_kept_and_replayed(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    async def handler(request: JSON) -> JSON:
        if request["method"] == "CancelTask":
            return rpc_error(request, -32002, "too late to cancel")
        return rpc_result(request, task_body("1.0", "T1", "working", "C1"))

    agent = await register_fake(client, fake_agent, handler)
    await start(client, agent)

    first = await client.call("POST", cancel_path(agent, "T1"), headers=keyed("c"))
    again = await client.call("POST", cancel_path(agent, "T1"), headers=keyed("c"))

    assert assert_problem(first, 409)["type"] == PROBLEM + "task-not-cancelable"
    assert_replay_of(first, again)
    assert [r["method"] for r in agent.received] == ["SendMessage", "CancelTask"]
    [row] = await key_rows(db)
    assert row["status"] == 409


async def test_unkeyed_requests_keep_no_key(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)

    r = await client.call("POST", agent.messages(task["id"]), {"text": "Paris"})

    assert r.status == 200, r.raw
    assert "Idempotent-Replayed" not in r.headers
    assert await key_rows(db) == []


# ---- a key reused for another request -----------------------------------------------------


async def test_key_reused_with_another_body_is_422_and_reaches_nothing(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    first = await client.call("POST", start_path(agent), {"text": "weather?"}, headers=keyed("k"))
    assert first.status == 200, first.raw

    r = await client.call("POST", start_path(agent), {"text": "rain?"}, headers=keyed("k"))

    assert assert_problem(r, 422)["type"] == REUSED
    assert len(agent.received) == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 1


async def test_key_reused_on_another_path_is_422(client: Client, fake_agent: StartFake) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    one, two = await start(client, agent), await start(client, agent)
    r = await client.call("POST", agent.messages(one["id"]), {"text": "Paris"}, headers=keyed("k"))
    assert r.status == 200, r.raw

    on_other_task = await client.call(
        "POST", agent.messages(two["id"]), {"text": "Paris"}, headers=keyed("k")
    )
    on_other_route = await client.call("POST", cancel_path(agent, one["id"]), headers=keyed("k"))

    assert assert_problem(on_other_task, 422)["type"] == REUSED
    assert assert_problem(on_other_route, 422)["type"] == REUSED
    assert len(agent.received) == 3
    assert [e["type"] for e in await events(client, agent, two["id"])] == ["task_created"]


async def test_key_reused_refusal_leaves_the_task_unclaimed(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted(asks_again, asks_again)
    agent = await register_fake(client, fake_agent, script)
    await start(client, agent)
    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"}, headers=keyed("k"))
    assert r.status == 200, r.raw

    r = await client.call("POST", agent.messages("T1"), {"text": "Rome"}, headers=keyed("k"))

    assert assert_problem(r, 422)["type"] == REUSED
    claim = await db.fetchval(f"SELECT token FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T1'")
    assert claim is None
    r = await client.call("POST", agent.messages("T1"), {"text": "Rome"})
    assert r.status == 200, r.raw
    assert script.follow_ups == 2


# ---- a key in flight ----------------------------------------------------------------------


@pytest.fixture
async def holding(fake_agent: StartFake) -> AsyncIterator[tuple[HeldAgent, StartFake]]:
    """A 1.0 agent that starts T1 and holds its answer to the first follow-up."""
    agent = HeldAgent()
    try:
        yield agent, fake_agent
    finally:
        agent.release.set()


async def test_same_key_while_in_flight_is_409_in_flight_not_task_busy(
    client: Client,
    db: asyncpg.Connection,
    settings: Settings,
    holding: tuple[HeldAgent, StartFake],
) -> None:
    script, fake_agent = holding
    agent = await register_fake(client, fake_agent, script)
    await start(client, agent)
    path = agent.messages("T1")
    first = asyncio.create_task(client.call("POST", path, {"text": "Paris"}, headers=keyed("k")))
    await script.arrived.wait()

    [row] = await key_rows(db)
    assert row["status"] is None
    lease = (row["locked_until"] - row["created_at"]).total_seconds()
    assert lease == pytest.approx(settings.agent_timeout_s + settings.claim_margin_s, abs=0.5)
    again = await client.call("POST", path, {"text": "Paris"}, headers=keyed("k"))
    other_body = await client.call("POST", path, {"text": "Rome"}, headers=keyed("k"))
    other_key = await client.call("POST", path, {"text": "Paris"}, headers=keyed("k2"))

    problem = assert_problem(again, 409)
    assert problem["type"] == IN_FLIGHT != BUSY_TYPE
    assert again.headers["Retry-After"]
    assert assert_problem(other_body, 422)["type"] == REUSED
    assert assert_problem(other_key, 409)["type"] == BUSY_TYPE
    assert [r["key"] for r in await key_rows(db)] == ["k"]  # k2 was released
    script.release.set()
    answered = await first
    assert answered.status == 200, answered.raw
    assert script.follow_ups == 1
    assert [e["type"] for e in await events(client, agent, "T1")] == [
        "task_created",
        "task_continued",
    ]


async def test_start_with_a_key_in_flight_is_409_in_flight(
    client: Client, fake_agent: StartFake
) -> None:
    arrived, release = asyncio.Event(), asyncio.Event()

    async def slow_start(request: JSON) -> JSON:
        arrived.set()
        await release.wait()
        return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))

    agent = await register_fake(client, fake_agent, slow_start)
    call = client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))
    first = asyncio.create_task(call)
    try:
        await arrived.wait()
        again = await client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))
        assert assert_problem(again, 409)["type"] == IN_FLIGHT
    finally:
        release.set()
    assert (await first).status == 200
    assert len(agent.received) == 1


async def test_key_left_in_flight_past_its_lease_is_taken_by_a_retry(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    arrived, release = asyncio.Event(), asyncio.Event()

    async def first_one_hangs(request: JSON) -> JSON:
        if not arrived.is_set():
            arrived.set()
            await release.wait()
        return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))

    agent = await register_fake(client, fake_agent, first_one_hangs)
    call = client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))
    first = asyncio.create_task(call)
    try:
        await arrived.wait()
        # As if its holder had died: the lease ran out and no answer was kept.
        await db.execute("UPDATE a2a_idempotency_keys SET locked_until = now() - interval '1s'")

        retry = await client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))

        assert retry.status == 200, retry.raw
        assert "Idempotent-Replayed" not in retry.headers
        assert len(agent.received) == 2
    finally:
        release.set()
        await first
    [row] = await key_rows(db)
    assert bytes(row["body"]) == retry.raw  # the late first answer no longer owns the key


# ---- answers that are not kept ------------------------------------------------------------


async def test_502_is_not_kept_and_the_retry_goes_through(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted(not_json, completes)
    agent = await register_fake(client, fake_agent, script)
    await start(client, agent)

    failed = await client.call("POST", agent.messages("T1"), {"text": "Paris"}, headers=keyed("k"))
    assert assert_problem(failed, 502)
    assert await key_rows(db) == []
    retry = await client.call("POST", agent.messages("T1"), {"text": "Paris"}, headers=keyed("k"))

    assert retry.status == 200, retry.raw
    assert "Idempotent-Replayed" not in retry.headers
    assert script.follow_ups == 2
    assert [e["type"] for e in await events(client, agent, "T1")] == [
        "task_created",
        "task_continue_failed",
        "task_continued",
    ]


async def test_504_is_not_kept_and_the_retry_goes_through(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted(too_slow, completes)
    agent = await register_fake(client, fake_agent, script, timeoutSeconds=0.3)
    await start(client, agent)

    failed = await client.call("POST", agent.messages("T1"), {"text": "Paris"}, headers=keyed("k"))
    assert assert_problem(failed, 504)
    assert await key_rows(db) == []
    retry = await client.call("POST", agent.messages("T1"), {"text": "Paris"}, headers=keyed("k"))

    assert retry.status == 200, retry.raw
    assert script.follow_ups == 2
    logged = await events(client, agent, "T1")
    assert [e["type"] for e in logged][-2:] == ["task_continue_failed", "task_continued"]


async def test_503_is_not_kept_and_the_retry_goes_through(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    # One call at a time per agent: a second one meanwhile is 503 agent-busy.
    arrived, release = asyncio.Event(), asyncio.Event()

    async def first_one_waits(request: JSON) -> JSON:
        if not arrived.is_set():
            arrived.set()
            await release.wait()
        return rpc_result(request, task_body("1.0", f"T{uuid.uuid4()}", "input-required"))

    one_at_a_time = msgspec.structs.replace(settings, agent_concurrency=1)
    async with serve_asgi(create_app(one_at_a_time)) as base, aiohttp.ClientSession() as http:
        client = Client(base, http)
        agent = await register_fake(client, fake_agent, first_one_waits)
        holder = asyncio.create_task(client.call("POST", start_path(agent), {"text": "a"}))
        try:
            await arrived.wait()
            failed = await client.call("POST", start_path(agent), {"text": "b"}, headers=keyed("k"))
            assert assert_problem(failed, 503)
            assert await key_rows(db) == []
        finally:
            release.set()
        assert (await holder).status == 200
        retry = await client.call("POST", start_path(agent), {"text": "b"}, headers=keyed("k"))

    assert retry.status == 200, retry.raw
    assert "Idempotent-Replayed" not in retry.headers
    assert len(agent.received) == 2
    [row] = await key_rows(db)
    assert row["status"] == 200


async def test_gateways_own_4xx_is_not_kept_and_the_retry_goes_through(
    client: Client, db: asyncpg.Connection, holding: tuple[HeldAgent, StartFake]
) -> None:
    script, fake_agent = holding
    agent = await register_fake(client, fake_agent, script)
    await start(client, agent)
    first = asyncio.create_task(client.call("POST", agent.messages("T1"), {"text": "Paris"}))
    await script.arrived.wait()

    busy = await client.call("POST", agent.messages("T1"), {"text": "Rome"}, headers=keyed("k"))

    assert assert_problem(busy, 409)["type"] == BUSY_TYPE
    assert await key_rows(db) == []
    script.release.set()
    assert (await first).status == 200
    terminal = await client.call("POST", agent.messages("T1"), {"text": "Rome"}, headers=keyed("k"))
    assert assert_problem(terminal, 409)["type"] == PROBLEM + "task-terminal"
    assert "Idempotent-Replayed" not in terminal.headers
    assert await key_rows(db) == []


async def test_refusals_before_the_agent_keep_no_key(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    canceled = await client.call("POST", cancel_path(agent, task["id"]))
    assert canceled.status == 200

    refusals = [
        await client.call(
            "POST", start_path(agent), {"text": "hi", "teamId": "x"}, headers=keyed("a")
        ),
        await client.call(
            "POST", f"/v1/a2a/{uuid.uuid4()}/messages", {"text": "hi"}, headers=keyed("b")
        ),
        await client.call("POST", agent.messages("nope"), {"text": "hi"}, headers=keyed("c")),
        await client.call("POST", cancel_path(agent, task["id"]), headers=keyed("d")),
        await client.call("POST", agent.messages(task["id"]), {"text": "x"}, headers=keyed("e")),
        await client.call("POST", start_path(agent), {"text": 1}, headers=keyed("f")),
    ]

    assert [r.status for r in refusals] == [403, 404, 404, 409, 409, 422]
    assert await key_rows(db) == []
    assert len(agent.received) == 2


# ---- the header ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [b"", b"x" * 256, b"caf\xc3\xa9", b"tab\there"],
    ids=["empty", "too-long", "not-ascii", "control"],
)
async def test_malformed_key_is_422(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, value: bytes
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    headers = {"Idempotency-Key": value.decode("latin-1")}

    r = await client.call("POST", start_path(agent), {"text": "hi"}, headers=headers)

    problem = assert_problem(r, 422)
    assert problem["type"] == PROBLEM + "invalid-idempotency-key"
    assert problem["errors"][0]["loc"] == "$.headers.Idempotency-Key"
    assert agent.received == []
    assert await key_rows(db) == []


async def test_key_sent_twice_is_422(client: Client, fake_agent: StartFake) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    async with client.session.post(
        client.base + start_path(agent),
        data=b'{"text": "hi"}',
        headers=[
            ("Authorization", f"Bearer {token()}"),
            ("Idempotency-Key", "a"),
            ("Idempotency-Key", "b"),
        ],
    ) as r:
        assert r.status == 422
    assert agent.received == []


async def test_key_of_255_printable_characters_is_accepted(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    key = ("a b~!" * 51)[:255]

    first = await client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed(key))
    again = await client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed(key))

    assert first.status == 200, first.raw
    assert_replay_of(first, again)


# ---- keys per caller, expiry --------------------------------------------------------------


async def test_keys_are_per_caller(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"), visibility="public")
    bob = client.as_(token(BOB))

    by_alice = await client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))
    by_bob = await bob.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))

    assert by_alice.status == by_bob.status == 200
    assert "Idempotent-Replayed" not in by_bob.headers
    assert await task_id_of(by_alice) != await task_id_of(by_bob)
    assert len(agent.received) == 2
    assert [r["caller"] for r in await key_rows(db)] == [ALICE, BOB]
    # Bob's retry replays Bob's answer, never Alice's.
    again = await bob.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))
    assert_replay_of(by_bob, again)


async def test_key_past_its_ttl_counts_as_absent(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    first = await client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))
    assert first.status == 200
    await db.execute("UPDATE a2a_idempotency_keys SET expires_at = now() - interval '1s'")

    same = await client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))
    other = await client.call("POST", start_path(agent), {"text": "yo"}, headers=keyed("k2"))
    await db.execute("UPDATE a2a_idempotency_keys SET expires_at = now() - interval '1s'")
    reused = await client.call("POST", start_path(agent), {"text": "yo"}, headers=keyed("k"))

    assert same.status == other.status == reused.status == 200
    assert "Idempotent-Replayed" not in same.headers
    assert "Idempotent-Replayed" not in reused.headers
    assert await task_id_of(same) != await task_id_of(first)
    assert len(agent.received) == 4


async def test_sweep_removes_expired_keys_only(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    for key in ("old-1", "old-2", "new"):
        r = await client.call("POST", start_path(agent), {"text": key}, headers=keyed(key))
        assert r.status == 200
    await db.execute(
        "UPDATE a2a_idempotency_keys SET expires_at = now() - interval '1s' WHERE key LIKE 'old%'"
    )

    assert await sweep(db, batch=1) == 2

    assert [r["key"] for r in await key_rows(db)] == ["new"]


async def test_expired_keys_are_removed_in_the_background(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    quick = msgspec.structs.replace(settings, idempotency_ttl_s=0.2, idempotency_sweep_s=0.05)
    async with serve_asgi(create_app(quick)) as base, aiohttp.ClientSession() as http:
        client = Client(base, http)
        agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
        r = await client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))
        assert r.status == 200

        async def swept() -> bool:
            return await key_rows(db) == []

        await eventually(swept, "the expired key swept")
        assert await key_rows(db) == []


# ---- a streamed answer --------------------------------------------------------------------


@pytest.fixture
async def gw(settings: Settings) -> AsyncIterator[Gateway]:
    """The resources of a gateway, to drive a key as a streaming route does."""
    pool = await create_pool(
        settings.database_url or "", 2, statement_cache=settings.db_statement_cache
    )
    try:
        async with aiohttp.ClientSession() as http:
            yield Gateway(settings, pool, http, Sealer(decode_key(settings.encryption_key)))
    finally:
        await pool.close()


def sse() -> StreamingResponse:
    return StreamingResponse(iter([b"data: {}\n\n"]), media_type="text/event-stream")


async def test_streamed_follow_up_points_retries_at_the_event_stream(
    client: Client, db: asyncpg.Connection, gw: Gateway, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    path = agent.messages(task["id"])
    raw = msgspec.json.encode({"text": "Paris"})
    digest = request_hash("POST", path, raw)
    held_key = idempotent(gw, Caller(sub=ALICE), "s", "continue", uuid.UUID(agent.id), digest)
    held_key.stream_task = task["id"]
    async with held_key:
        held_key.keep(sse())
    [row] = await key_rows(db)
    assert (row["streamed"], row["status"], row["body"]) == (True, None, None)

    retry = await client.call("POST", path, data=raw, headers=keyed("s"))
    other = await client.call("POST", path, {"text": "Rome"}, headers=keyed("s"))

    problem = assert_problem(retry, 409)
    assert problem["type"] == STREAMED
    assert problem["eventsUrl"] == agent.task(task["id"]) + "/events"
    assert problem["taskId"] == task["id"]
    assert assert_problem(other, 422)["type"] == REUSED
    assert len(agent.received) == 1


async def test_a_streamed_key_points_at_the_events_url_any_task_id_can_be_read_at(
    client: Client, db: asyncpg.Connection, gw: Gateway, fake_agent: StartFake
) -> None:
    async def odd_ids(request: JSON) -> JSON:
        return rpc_result(request, task_body("1.0", "runs/42 x%", "input-required", "C1"))

    agent = await register_fake(client, fake_agent, odd_ids)
    started = await client.call("POST", start_path(agent), {"text": "hi"})
    assert started.status == 200, started.raw
    path = f"/v1/a2a/{agent.id}/tasks/runs%2F42%20x%25/messages"
    raw = msgspec.json.encode({"text": "Paris"})
    # The gateway knows a request by its path as routed: '/' and '%' stay encoded in a segment.
    digest = request_hash("POST", path.replace("%20", " "), raw)
    held_key = idempotent(gw, Caller(sub=ALICE), "s", "continue", uuid.UUID(agent.id), digest)
    held_key.stream_task = "runs/42 x%"
    async with held_key:
        held_key.keep(sse())

    retry = await client.call("POST", path, data=raw, headers=keyed("s"))

    url = assert_problem(retry, 409)["eventsUrl"]
    assert url == f"/v1/a2a/{agent.id}/tasks/runs%2F42%20x%25/events"
    assert retry.headers["Link"] == f'<{url}>; rel="related"'
    listed = await client.call("GET", url)
    assert listed.status == 200, listed.raw
    assert [e["type"] for e in listed.json()["events"]] == ["task_created"]


async def test_streamed_start_names_its_task_once_the_stream_does(
    client: Client, db: asyncpg.Connection, gw: Gateway, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    raw = msgspec.json.encode({"text": "hi"})
    digest = request_hash("POST", start_path(agent), raw)
    held_key = idempotent(gw, Caller(sub=ALICE), "s", "start", uuid.UUID(agent.id), digest)
    async with held_key:
        held_key.keep(sse())

    before_the_task = await client.call("POST", start_path(agent), data=raw, headers=keyed("s"))
    await held_key.mark_streamed("T9")
    after_the_task = await client.call("POST", start_path(agent), data=raw, headers=keyed("s"))

    assert assert_problem(before_the_task, 409)["type"] == STREAMED
    assert "eventsUrl" not in before_the_task.json()
    assert assert_problem(after_the_task, 409)["eventsUrl"] == agent.task("T9") + "/events"
    assert agent.received == []


async def post_keyed_stream(client: Client, path: str, body: JSON, key: str) -> Response:
    """POST asking for a stream; the whole answer, events and all, as one response."""
    headers = {"Accept": "text/event-stream", **keyed(key)}
    return await client.call("POST", path, body, headers=headers)


def first_task_of(stream: Response) -> str:
    """The task id the first event of a streamed start names."""
    data = next(line for line in stream.raw.decode().splitlines() if line.startswith("data:"))
    result = msgspec.json.decode(data.removeprefix("data:").strip())["result"]
    return str(result["task"]["id"] if "task" in result else result["id"])


async def test_streamed_start_with_a_key_keeps_nothing_and_sends_retries_to_its_events(
    client: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent(streaming=True) as sdk:
        agent = await register(client, sdk.url, "1.0", sdk.received, capabilities=STREAMING)
        first = await post_keyed_stream(client, start_path(agent), {"text": "hi"}, "s")
        task_id = first_task_of(first)

        streamed_retry = await post_keyed_stream(client, start_path(agent), {"text": "hi"}, "s")
        blocking_retry = await client.call(
            "POST", start_path(agent), {"text": "hi"}, headers=keyed("s")
        )

    assert first.status == 200
    assert first.headers["Content-Type"].startswith("text/event-stream")
    [row] = await key_rows(db)
    assert (row["streamed"], row["stream_task"], row["status"]) == (True, task_id, None)
    for retry in (streamed_retry, blocking_retry):
        problem = assert_problem(retry, 409)
        assert problem["type"] == STREAMED
        assert problem["eventsUrl"] == agent.task(task_id) + "/events"
    assert len(sdk.received) == 1


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_streamed_start_to_an_agent_without_streaming_sends_retries_to_its_events(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, version: str
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake(version), version)
    first = await post_keyed_stream(client, start_path(agent), {"text": "hi"}, "s")
    task_id = first_task_of(first)

    retry = await post_keyed_stream(client, start_path(agent), {"text": "hi"}, "s")

    assert first.headers["Content-Type"].startswith("text/event-stream")
    problem = assert_problem(retry, 409)
    assert (problem["type"], problem["taskId"]) == (STREAMED, task_id)
    assert problem["eventsUrl"] == agent.task(task_id) + "/events"
    assert retry.headers["Link"] == f'<{problem["eventsUrl"]}>; rel="related"'
    assert "not named" not in problem["detail"]
    assert len(agent.received) == 1


async def test_facade_streamed_start_to_an_agent_without_streaming_names_its_events(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    body = {"jsonrpc": "2.0", "method": "SendStreamingMessage", "params": message_v10("hi")}
    stream = {"Accept": "text/event-stream"}
    first = await facade_call(client, agent, {**body, "id": 1}, **stream)
    again = await facade_call(client, agent, {**body, "id": 2}, **stream)

    assert first.headers["Content-Type"].startswith("text/event-stream")
    metadata = again.json()["error"]["data"][0]["metadata"]
    assert metadata["type"] == "idempotency-key-streamed"
    assert metadata["eventsUrl"] == agent.task(metadata["taskId"]) + "/events"
    assert len(agent.received) == 1


async def test_streamed_follow_up_with_a_key_sends_retries_to_the_tasks_events(
    client: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent(streaming=True) as sdk:
        agent = await register(client, sdk.url, "1.0", sdk.received, capabilities=STREAMING)
        task = await start(client, agent, "hi")
        path = agent.messages(task["id"])
        first = await post_keyed_stream(client, path, {"text": "Paris"}, "s")
        retry = await post_keyed_stream(client, path, {"text": "Paris"}, "s")

    assert first.status == 200
    assert first.headers["Content-Type"].startswith("text/event-stream")
    problem = assert_problem(retry, 409)
    assert (problem["type"], problem["taskId"]) == (STREAMED, task["id"])
    assert problem["eventsUrl"] == agent.task(task["id"]) + "/events"
    assert len(sdk.received) == 2
    [row] = await key_rows(db)
    assert (row["route"], row["streamed"], row["body"]) == ("continue", True, None)


async def test_streamed_request_refused_before_the_stream_releases_its_key(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"), capabilities=STREAMING)

    unknown = await post_keyed_stream(client, agent.messages("nope"), {"text": "x"}, "s")
    invisible = await post_keyed_stream(
        client.as_(token(BOB)), start_path(agent), {"text": "x"}, "s"
    )

    assert assert_problem(unknown, 404)
    assert assert_problem(invisible, 404)
    assert await key_rows(db) == []
    assert agent.received == []


# ---- the A2A façade: a messageId is a key ------------------------------------------------


def facade_send(params: JSON, rpc_id: Any) -> JSON:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "SendMessage", "params": params}


def facade_call(client: Client, agent: Agent, body: JSON, **headers: str) -> Awaitable[Response]:
    all_headers = {"A2A-Version": "1.0", **headers}
    return client.call("POST", f"/a2a/{agent.id}", body, headers=all_headers)


async def test_facade_send_retried_with_its_message_id_is_replayed_with_the_new_rpc_id(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    params = message_v10("weather?")

    first = await facade_call(client, agent, facade_send(params, "r1"))
    again = await facade_call(client, agent, facade_send(params, "r2"))

    assert first.status == again.status == 200
    assert (first.json()["id"], again.json()["id"]) == ("r1", "r2")
    assert again.json()["result"] == first.json()["result"]
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(agent.received) == 1
    task_id = first.json()["result"]["task"]["id"]
    assert [e["type"] for e in await events(client, agent, task_id)] == ["task_created"]


async def test_facade_follow_up_retried_with_its_message_id_reaches_the_agent_once(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    params = message_v10("Paris", task["id"])

    first = await facade_call(client, agent, facade_send(params, 1))
    again = await facade_call(client, agent, facade_send(params, 2))

    assert first.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert again.json() == {**first.json(), "id": 2}
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(agent.received) == 2
    logged = await events(client, agent, task["id"])
    assert [e["type"] for e in logged] == ["task_created", "task_continued"]


async def test_facade_message_id_reused_for_another_message_is_invalid_params(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    params = message_v10("weather?")
    other = {"message": {**params["message"], "parts": [{"text": "rain?"}]}}
    await facade_call(client, agent, facade_send(params, 1))

    r = await facade_call(client, agent, facade_send(other, 2))

    error = r.json()["error"]
    assert (r.status, error["code"]) == (200, -32602)
    assert error["data"][0]["metadata"]["type"] == "idempotency-key-reused"
    assert len(agent.received) == 1


async def test_facade_long_message_id_still_works_as_a_key(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    params = message_v10("weather?")
    params["message"]["messageId"] = "é" * 300

    first = await facade_call(client, agent, facade_send(params, 1))
    again = await facade_call(client, agent, facade_send(params, 2))

    assert first.json()["result"] == again.json()["result"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(agent.received) == 1


async def test_facade_bad_idempotency_key_header_is_invalid_params(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    headers = {"Idempotency-Key": "x" * 256}

    r = await facade_call(client, agent, facade_send(message_v10("hi"), 1), **headers)

    error = r.json()["error"]
    assert (r.status, error["code"]) == (200, -32602)
    assert error["data"][0]["metadata"]["type"] == "invalid-idempotency-key"
    assert agent.received == []


async def test_facade_cancel_with_a_key_is_replayed(client: Client, fake_agent: StartFake) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    body = {"jsonrpc": "2.0", "method": "CancelTask", "params": {"id": task["id"]}}

    first = await facade_call(client, agent, {**body, "id": 1}, **keyed("c"))
    again = await facade_call(client, agent, {**body, "id": 2}, **keyed("c"))

    assert first.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert again.json() == {**first.json(), "id": 2}
    assert again.headers["Idempotent-Replayed"] == "true"
    assert [r["method"] for r in agent.received] == ["SendMessage", "CancelTask"]


async def test_facade_streamed_send_sends_retries_to_the_tasks_events(client: Client) -> None:
    async with run_sdk_agent(streaming=True) as sdk:
        agent = await register(client, sdk.url, "1.0", sdk.received, capabilities=STREAMING)
        params = message_v10("hi")
        body = {"jsonrpc": "2.0", "method": "SendStreamingMessage", "params": params}
        stream = {"Accept": "text/event-stream"}
        first = await facade_call(client, agent, {**body, "id": 1}, **stream)
        again = await facade_call(client, agent, {**body, "id": 2}, **stream)

    assert first.headers["Content-Type"].startswith("text/event-stream")
    error = again.json()["error"]
    metadata = error["data"][0]["metadata"]
    assert metadata["type"] == "idempotency-key-streamed"
    assert metadata["eventsUrl"] == agent.task(metadata["taskId"]) + "/events"
    assert len(sdk.received) == 1


# ---- statements ---------------------------------------------------------------------------


async def test_keyed_follow_up_costs_one_statement_more_than_unkeyed(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    queries: list[str] = []
    app = create_app(quiet(settings), on_query=lambda record: queries.append(record.query))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as http:
        client = Client(base, http)
        agent = await register_fake(client, fake_agent, Scripted(*[asks_again] * 4))
        await start(client, agent)
        counts = []
        for headers in ({}, keyed("warm"), {}, keyed("k")):
            queries.clear()
            r = await client.call("POST", agent.messages("T1"), {"text": "x"}, headers=headers)
            assert r.status == 200, r.raw
            counts.append(len(request_statements(queries)))

    unkeyed, keyed_count = counts[2], counts[3]
    assert unkeyed == 2
    assert keyed_count == unkeyed + 1


# ---- across processes ---------------------------------------------------------------------


async def ten_at_once(
    clients: list[Client], path: str, body: JSON, agent_calls: Callable[[], int]
) -> tuple[list[Response], set[asyncio.Task[Response]]]:
    """Send ten keyed copies of one request; return the nine refusals and the one held."""
    pending = {
        asyncio.create_task(c.call("POST", path, body, headers=keyed("ten"))) for c in clients
    }
    refused: list[Response] = []
    while len(refused) < 9:
        done, pending = await asyncio.wait(pending, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        assert done, f"only {len(refused)} answered; the agent got {agent_calls()} calls"
        refused += [t.result() for t in done]
    return refused, pending


async def test_ten_keyed_follow_ups_over_two_gateways_reach_the_agent_once(
    spawn_gateway: Callable[[], Awaitable[GatewayProcess]],
    session: aiohttp.ClientSession,
    held: tuple[HeldAgent, str, list[JSON]],
) -> None:
    script, url, received = held
    _, via_a, _, via_b = await two_gateways(spawn_gateway, session)
    agent = await register(via_a, url, "1.0", received, timeoutSeconds=30)
    await start(via_a, agent)
    path = agent.messages("T1")

    refused, pending = await ten_at_once(
        [via_a, via_b] * 5, path, {"text": "Paris"}, lambda: script.follow_ups
    )

    assert {assert_problem(r, 409)["type"] for r in refused} == {IN_FLIGHT}
    await asyncio.wait_for(script.arrived.wait(), 60)  # the one that holds the key
    assert script.follow_ups == 1
    script.release.set()
    [answered] = [await t for t in pending]
    assert answered.status == 200, answered.raw
    replay = await via_b.call("POST", path, {"text": "Paris"}, headers=keyed("ten"))
    assert_replay_of(answered, replay)
    assert script.follow_ups == 1
    logged = await events(via_a, agent, "T1")
    assert [e["type"] for e in logged] == ["task_created", "task_continued"]


async def test_ten_keyed_starts_over_two_gateways_reach_the_agent_once(
    spawn_gateway: Callable[[], Awaitable[GatewayProcess]],
    session: aiohttp.ClientSession,
    fake_agent: StartFake,
) -> None:
    arrived, release = asyncio.Event(), asyncio.Event()

    async def held_start(request: JSON) -> JSON:
        arrived.set()
        await release.wait()
        return rpc_result(request, task_body("1.0", f"T{uuid.uuid4()}", "input-required"))

    fake = await fake_agent(held_start)
    try:
        _, via_a, _, via_b = await two_gateways(spawn_gateway, session)
        agent = await register(via_a, fake.url, "1.0", fake.received, timeoutSeconds=30)

        refused, pending = await ten_at_once(
            [via_a, via_b] * 5, start_path(agent), {"text": "hi"}, lambda: len(fake.received)
        )

        assert {assert_problem(r, 409)["type"] for r in refused} == {IN_FLIGHT}
        await asyncio.wait_for(arrived.wait(), 60)  # the one that holds the key
        assert len(fake.received) == 1
    finally:
        release.set()
    [answered] = [await t for t in pending]
    assert answered.status == 200, answered.raw
    replay = await via_a.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("ten"))
    assert_replay_of(answered, replay)
    assert len(fake.received) == 1
    r = await via_a.call("GET", f"/v1/a2a/{agent.id}/tasks")
    assert len(r.json()["tasks"]) == 1


# ---- settings -----------------------------------------------------------------------------


def test_idempotency_settings_come_from_the_environment() -> None:
    given = load_settings({"A2AC_IDEMPOTENCY_TTL_S": "60", "A2AC_IDEMPOTENCY_SWEEP_S": "2.5"})
    defaults = load_settings({})

    assert (given.idempotency_ttl_s, given.idempotency_sweep_s) == (60.0, 2.5)
    assert (defaults.idempotency_ttl_s, defaults.idempotency_sweep_s) == (86400.0, 300.0)
    for name in ("A2AC_IDEMPOTENCY_TTL_S", "A2AC_IDEMPOTENCY_SWEEP_S"):
        with pytest.raises(SettingsError, match=name):
            load_settings({name: "0"})


def test_api_description_names_the_key_on_start_continue_and_cancel() -> None:
    document = build_document(ROUTES)
    keyed_routes = {
        ("post", "/v1/a2a/{agent_id}/messages"),
        ("post", "/v1/a2a/{agent_id}/tasks/{task_id}/messages"),
        ("post", "/v1/a2a/{agent_id}/tasks/{task_id}/cancel"),
    }

    for path, item in document["paths"].items():
        for method, operation in item.items():
            names = {p["name"] for p in operation["parameters"]}
            assert ("Idempotency-Key" in names) == ((method, path) in keyed_routes), path
            if (method, path) in keyed_routes:
                assert "Idempotent-Replayed" in operation["responses"]["200"]["headers"]
                assert {"409", "422"} <= set(operation["responses"])
    text = msgspec.json.encode(document).decode()
    for slug in ("reused", "in-flight", "streamed"):
        assert f"{PROBLEM}idempotency-key-{slug}" in text


async def test_replays_are_counted(client: Client, fake_agent: StartFake) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    before = await scrape(client)

    for _ in range(3):
        r = await client.call("POST", start_path(agent), {"text": "hi"}, headers=keyed("k"))
        assert r.status == 200

    assert moved(before, await scrape(client), "a2ac_idempotent_replays_total") == 2
