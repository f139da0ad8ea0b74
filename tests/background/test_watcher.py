"""The watcher (SPEC §8.4): live tasks are followed to their next settled state by themselves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web

from a2a_continue.a2a.answers import TASK, Update
from a2a_continue.app import create_app
from a2a_continue.core.tasks.updates import record_update
from a2a_continue.ops.sample_agent import start_sample_agent
from a2a_continue.settings import Settings, SettingsError, load_settings
from tests.support.agents import BUSY_TYPE, Agent, events, register, register_fake
from tests.support.client import Client, assert_problem
from tests.support.facade_clients import rpc as facade_rpc
from tests.support.fakes import StartFake, rpc_error, rpc_result, task_body, task_status
from tests.support.metrics import scrape
from tests.support.rpc import message_v03, message_v10
from tests.support.sdk_agent import run_sdk_agent
from tests.support.servers import serve_asgi
from tests.support.sse_client import all_events
from tests.support.waiting import eventually
from tests.support.watching import fast, lease_of, settles_as, stored_state, watch_ended

JSON = dict[str, Any]
GET_TASK = {"1.0": "GetTask", "0.3": "tasks/get"}
RETURN_NOW = {"configuration": {"returnImmediately": True}}


@pytest.fixture
async def watching(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    """A client of a gateway whose watcher polls every few tens of milliseconds."""
    async with serve_asgi(create_app(fast(settings))) as base, aiohttp.ClientSession() as s:
        yield Client(base, s)


def calls(agent: Agent, method: str) -> list[JSON]:
    return [r for r in agent.received if r.get("method") == method]


async def start_now(client: Client, agent: Agent, text: str) -> tuple[str, str]:
    """Start with returnImmediately; return the task id and the state the answer showed."""
    r = await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": text, **RETURN_NOW})
    assert r.status == 200, r.raw
    result = r.json()["result"]
    task = result.get("task", result)
    return task["id"], r.headers["A2A-Task-State"]


# ---- a real a2a-sdk agent -----------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_return_immediately_start_is_polled_to_input_required(
    watching: Client, db: asyncpg.Connection, version: str
) -> None:
    async with run_sdk_agent() as sdk:
        agent = await register(watching, sdk.url, version, sdk.received)

        task_id, answered = await start_now(watching, agent, "slow")

        assert answered in ("submitted", "working")
        config = sdk.received[0]["params"]["configuration"]
        assert config == ({"returnImmediately": True} if version == "1.0" else {"blocking": False})
        await eventually(lambda: calls(agent, GET_TASK[version]), "a GetTask")
        sdk.proceed.set()
        await settles_as(watching, agent, task_id, "input-required")
        await watch_ended(db, task_id)

    logged = await events(watching, agent, task_id)
    assert logged[0]["type"] == "task_created"
    updates = logged[1:]
    assert updates and {e["type"] for e in updates} == {"task_updated"}
    assert {e["data"]["source"] for e in updates} == {"poll"}
    assert {e["actor"] for e in updates} == {"a2a-continue"}
    assert (updates[-1]["newState"], updates[-1]["data"]) == ("input-required", {"source": "poll"})
    assert not calls(agent, "SendMessage")[1:] and not calls(agent, "message/send")[1:]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_return_immediately_follow_up_is_polled_to_completion(
    watching: Client, db: asyncpg.Connection, version: str
) -> None:
    async with run_sdk_agent(streaming=True, pause_s=10.0) as sdk:
        agent = await register(watching, sdk.url, version, sdk.received)
        r = await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
        assert r.headers["A2A-Task-State"] == "input-required"
        result = r.json()["result"]
        task_id = result.get("task", result)["id"]

        r = await watching.call("POST", agent.messages(task_id), {"text": "slow", **RETURN_NOW})

        assert r.status == 200, r.raw
        assert r.headers["A2A-Task-State"] in ("working", "input-required")
        await eventually(lambda: calls(agent, GET_TASK[version]), "a GetTask")
        sdk.proceed.set()
        await settles_as(watching, agent, task_id, "completed")

    logged = await events(watching, agent, task_id)
    continued = [e["type"] for e in logged].index("task_continued")
    after = logged[continued + 1 :]
    assert after and {(e["type"], e["data"]["source"]) for e in after} == {("task_updated", "poll")}
    assert after[-1]["newState"] == "completed"
    stored = (await watching.call("GET", agent.task(task_id))).json()
    assert "forecast" in [a["artifactId"] for a in stored["artifacts"]]


SUBSCRIBE = {"1.0": "SubscribeToTask", "0.3": "tasks/resubscribe"}


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_return_immediately_start_of_a_streaming_agent_is_followed_by_subscription(
    watching: Client, db: asyncpg.Connection, version: str
) -> None:
    async with run_sdk_agent(streaming=True, pause_s=10.0) as sdk:
        agent = await register(
            watching, sdk.url, version, sdk.received, capabilities={"streaming": True}
        )

        task_id, answered = await start_now(watching, agent, "slow")

        assert answered in ("submitted", "working")
        await eventually(lambda: calls(agent, SUBSCRIBE[version]), "a subscription")
        sdk.proceed.set()
        await settles_as(watching, agent, task_id, "input-required")
        await watch_ended(db, task_id)

    assert len(calls(agent, SUBSCRIBE[version])) == 1
    assert calls(agent, GET_TASK[version]) == []
    logged = await events(watching, agent, task_id)
    updates = logged[1:]
    assert updates and {e["type"] for e in updates} == {"task_updated"}
    assert {e["data"]["source"] for e in updates} == {"subscribe"}
    assert updates[-1]["newState"] == "input-required"
    stored = (await watching.call("GET", agent.task(task_id))).json()
    assert [a["artifactId"] for a in stored["artifacts"]] == ["draft"]
    assert [p["text"] for p in stored["artifacts"][0]["parts"]] == ["Looking ", "for a city"]


async def test_refused_subscription_falls_back_to_polling(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    asked = {"id": "T1", "contextId": "C1", "status": {"state": "input-required"}}

    async def no_streams_here(request: JSON) -> JSON:
        if request["method"] == "tasks/resubscribe":
            return rpc_error(request, -32001, "Task not running")
        if request["method"] == "tasks/get":
            return rpc_result(request, {"kind": "task", **asked})
        return rpc_result(request, task_body("0.3", "T1", "working", "C1"))

    agent = await register_fake(
        watching, fake_agent, no_streams_here, "0.3", capabilities={"streaming": True}
    )
    await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})

    await settles_as(watching, agent, "T1", "input-required")
    await watch_ended(db, "T1")
    assert [r["method"] for r in agent.received] == [
        "message/send",
        "tasks/resubscribe",
        "tasks/get",
    ]
    logged = (await events(watching, agent, "T1"))[-1]
    assert (logged["type"], logged["data"]) == ("task_updated", {"source": "poll"})


async def test_task_left_working_by_a_broken_stream_is_followed_to_its_end(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    working = {"id": "T1", "contextId": "C1", "status": {"state": "TASK_STATE_WORKING"}}

    async def breaks_off(request: JSON) -> Any:
        if request["method"] == "SendStreamingMessage":
            frame = msgspec.json.encode(rpc_result(request, {"task": working}))
            return web.Response(body=b"data: " + frame + b"\n\n", content_type="text/event-stream")
        if request["method"] == "SubscribeToTask":
            return rpc_error(request, -32001, "Task not running")
        asking = {**working, "status": task_status("input-required", "Which city?")}
        return rpc_result(request, asking)

    agent = await register_fake(watching, fake_agent, breaks_off, capabilities={"streaming": True})
    r = await watching.call(
        "POST",
        f"/v1/a2a/{agent.id}/messages",
        {"text": "go"},
        headers={"Accept": "text/event-stream"},
    )
    assert r.status == 200, r.raw

    await settles_as(watching, agent, "T1", "input-required")
    await watch_ended(db, "T1")
    methods = [request["method"] for request in agent.received]
    assert methods == ["SendStreamingMessage", "SubscribeToTask", "GetTask"]
    logged = await events(watching, agent, "T1")
    assert [(e["type"], e["newState"]) for e in logged] == [
        ("task_created", "working"),
        ("task_updated", "input-required"),
    ]
    assert logged[-1]["data"] == {"source": "poll"}


@pytest.mark.parametrize("streaming", [True, False])
async def test_the_slow_sample_agent_is_followed_to_its_question_and_then_its_forecast(
    watching: Client, db: asyncpg.Connection, streaming: bool
) -> None:
    # Each turn works long enough for the watch to subscribe before it ends, even on a busy
    # machine (a poll needs no such margin).
    runner, url = await start_sample_agent(slow_s=4.0 if streaming else 1.0)
    try:
        agent = await register(watching, url, "1.0", [], capabilities={"streaming": streaming})
        task_id, answered = await start_now(watching, agent, "weather?")
        assert answered == "working"
        await settles_as(watching, agent, task_id, "input-required")
        await watch_ended(db, task_id)
        r = await watching.call("POST", agent.messages(task_id), {"text": "Oslo", **RETURN_NOW})
        assert r.headers["A2A-Task-State"] == "working"
        await settles_as(watching, agent, task_id, "completed")
    finally:
        await runner.cleanup()

    logged = await events(watching, agent, task_id)
    source = "subscribe" if streaming else "poll"
    # A subscription gets the forecast as an artifact update before the final status.
    forecast = [("task_updated", "working", source)] if streaming else []
    assert [(e["type"], e["newState"], e["data"].get("source")) for e in logged] == [
        ("task_created", "working", None),
        ("task_updated", "input-required", source),
        ("task_continued", "working", None),
        *forecast,
        ("task_updated", "completed", source),
    ]


# ---- scripted agents ----------------------------------------------------------------------


class Scripted:
    """A 1.0 agent: starts T1 in ``first`` and answers each GetTask with the next status."""

    def __init__(self, first: str, statuses: list[JSON | int], final: JSON | None = None) -> None:
        self.first = first
        self.statuses = statuses
        self.final = final
        self.gets = 0
        self.hold: asyncio.Event | None = None

    async def __call__(self, request: JSON) -> JSON:
        if request["method"] == "GetTask":
            self.gets += 1
            if self.hold is not None:
                await self.hold.wait()
            step = self.statuses.pop(0) if self.statuses else self.final
            if isinstance(step, int):
                return rpc_error(request, step, "Task not found")
            assert step is not None
            return rpc_result(request, {"id": "T1", "contextId": "C1", "status": step})
        return rpc_result(request, task_body("1.0", "T1", self.first, "C1"))


async def test_agent_that_lost_the_task_ends_the_watch_with_agent_lost_task(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted("working", [-32001])
    agent = await register_fake(watching, fake_agent, script)

    r = await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
    assert r.headers["A2A-Task-State"] == "working"

    async def failed() -> JSON | None:
        logged = await events(watching, agent, "T1")
        return logged[-1] if logged[-1]["type"] == "task_watch_failed" else None

    event = await eventually(failed, "task_watch_failed")
    assert event["data"]["reason"] == "agent-lost-task"
    assert (event["previousState"], event["newState"], event["actor"]) == (
        "working",
        "working",
        "a2a-continue",
    )
    assert await stored_state(watching, agent, "T1") == "working"
    assert (await lease_of(db, "T1"))["watch_failed_at"] is not None
    await asyncio.sleep(0.6)  # three pick-up periods: a given-up task is not taken again
    assert script.gets == 1
    assert [e["type"] for e in await events(watching, agent, "T1")] == [
        "task_created",
        "task_watch_failed",
    ]


async def watched_gauge(client: Client) -> float:
    samples = await scrape(client)
    gauge = ("a2ac_watched_tasks", frozenset())
    if gauge not in samples:
        pytest.fail("no a2ac_watched_tasks gauge")
    return samples[gauge]


async def none_watched(client: Client) -> None:
    async def zero() -> bool:
        return await watched_gauge(client) == 0

    await eventually(zero, "the gauge of watched tasks at 0")


@pytest.mark.parametrize("code", [-32601, -32004])
async def test_agent_that_cannot_answer_get_task_ends_the_watch_and_frees_the_task(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake, code: int
) -> None:
    script = Scripted("input-required", [code])
    agent = await register_fake(watching, fake_agent, script)
    _, answered = await start_now(watching, agent, "go")
    assert answered == "input-required"

    async def failed() -> JSON | None:
        logged = await events(watching, agent, "T1")
        return logged[-1] if logged[-1]["type"] == "task_watch_failed" else None

    event = await eventually(failed, "task_watch_failed")
    assert event["data"] == {
        "reason": "agent-cannot-get",
        "detail": f"the agent answered GetTask with {code}",
    }
    assert (await lease_of(db, "T1"))["watch_token"] is None
    await none_watched(watching)
    r = await watching.call("POST", agent.messages("T1"), {"text": "Paris"})
    assert r.status == 200, r.raw
    assert script.gets == 1


async def test_canceling_a_watched_task_ends_its_watch_whatever_the_agent_answers(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    async def no_answers(request: JSON) -> JSON:
        if request["method"] == "GetTask":
            return rpc_error(request, -32603, "Internal error")
        if request["method"] == "CancelTask":
            return rpc_result(request, {"id": "T1", "status": task_status("canceled")})
        return rpc_result(request, task_body("1.0", "T1", "working", "C1"))

    agent = await register_fake(watching, fake_agent, no_answers)
    await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
    await eventually(lambda: calls(agent, "GetTask"), "a GetTask")
    assert await watched_gauge(watching) == 1

    r = await watching.call("POST", agent.task("T1") + "/cancel")

    assert (r.status, r.json()["state"]) == (200, "canceled")
    await watch_ended(db, "T1")
    await none_watched(watching)
    asked = len(calls(agent, "GetTask"))
    await asyncio.sleep(0.6)  # several poll periods
    assert len(calls(agent, "GetTask")) == asked


async def test_a_task_settled_by_another_writer_ends_a_silent_subscription(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    subscribed, release = asyncio.Event(), asyncio.Event()

    async def silent(request: JSON) -> JSON:
        if request["method"] == "SubscribeToTask":
            subscribed.set()
            await release.wait()  # no frame, for longer than the test
        return rpc_result(request, task_body("1.0", "T1", "working", "C1"))

    agent = await register_fake(
        watching, fake_agent, silent, capabilities={"streaming": True}, timeoutSeconds=60
    )
    try:
        await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
        await asyncio.wait_for(subscribed.wait(), 10)
        row_id = await db.fetchval("SELECT id FROM a2a_tasks WHERE task_id = 'T1'")
        # What another process's refresh records: the agent now needs the caller.
        asking = Update(TASK, "T1", state="input-required", status_message={"messageId": "m"})
        await record_update(db, row_id, asking, source="refresh", actor="bob@example.com")

        await watch_ended(db, "T1")
        await none_watched(watching)
    finally:
        release.set()
    assert calls(agent, "GetTask") == []
    r = await watching.call("POST", agent.messages("T1"), {"text": "Paris"})
    assert r.status == 200, r.raw


async def test_a_follow_up_to_a_watched_task_is_busy_and_says_when_to_retry(
    watching: Client, fake_agent: StartFake
) -> None:
    script = Scripted("working", [], final=task_status("working"))
    agent = await register_fake(watching, fake_agent, script)
    await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
    await eventually(lambda: script.gets > 0, "a GetTask")

    r = await watching.call("POST", agent.messages("T1"), {"text": "Paris"})

    assert assert_problem(r, 409)["type"] == BUSY_TYPE
    assert r.headers["Retry-After"] == "1"


async def test_watch_longer_than_the_limit_ends_with_watch_expired(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted("working", [], final=task_status("working"))
    app = create_app(fast(settings, watch_max_s=0.3))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        agent = await register_fake(client, fake_agent, script)
        await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})

        async def failed() -> JSON | None:
            logged = await events(client, agent, "T1")
            return logged[-1] if logged[-1]["type"] == "task_watch_failed" else None

        event = await eventually(failed, "task_watch_failed")
        assert event["data"]["reason"] == "watch-expired"
        assert event["newState"] == "working"
        assert script.gets >= 1
        assert await stored_state(client, agent, "T1") == "working"
        lease = await lease_of(db, "T1")
        assert (lease["watch_token"], lease["watch_started_at"]) == (None, None)


async def test_deleting_the_agent_stops_the_watch(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted("working", [], final=task_status("working"))
    script.hold = asyncio.Event()
    agent = await register_fake(watching, fake_agent, script)
    await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
    await eventually(lambda: script.gets > 0, "a GetTask")

    r = await watching.call("DELETE", f"/v1/a2a/agents/{agent.id}")
    assert r.status == 204
    script.hold.set()
    await asyncio.sleep(0.6)  # several poll periods

    assert script.gets == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 0


async def test_return_immediately_follow_up_waits_past_the_status_it_was_answered_with(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    asked = task_status("input-required", "Which city?", "m1")
    # The agent answers the send with the task's previous status, reports it once more when
    # asked, then works, then asks again with a new message.
    script = Scripted(
        "input-required",
        [asked, task_status("working"), task_status("input-required", "Which country?", "m2")],
    )
    script.hold = asyncio.Event()

    async def agent_script(request: JSON) -> JSON:
        if request["method"] == "SendMessage" and "taskId" in request["params"]["message"]:
            return rpc_result(request, {"task": {"id": "T1", "contextId": "C1", "status": asked}})
        return await script(request)

    agent = await register_fake(watching, fake_agent, agent_script)
    await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
    body = {"text": "Paris", **RETURN_NOW}

    r = await watching.call("POST", agent.messages("T1"), body)

    assert r.status == 200, r.raw
    assert r.headers["A2A-Task-State"] == "input-required"
    assert agent.received[1]["params"]["configuration"] == {"returnImmediately": True}
    busy = await watching.call("POST", agent.messages("T1"), {"text": "Rome"})
    assert assert_problem(busy, 409)["type"] == BUSY_TYPE
    assert len(calls(agent, "SendMessage")) == 2
    script.hold.set()
    await eventually(lambda: not script.statuses, "every scripted status asked")
    await watch_ended(db, "T1")

    logged = await events(watching, agent, "T1")
    assert [(e["type"], e["newState"], e["data"].get("source")) for e in logged] == [
        ("task_created", "input-required", None),
        ("task_continued", "input-required", None),
        ("task_updated", "working", "poll"),
        ("task_updated", "input-required", "poll"),
    ]
    stored = (await watching.call("GET", agent.task("T1"))).json()
    assert stored["statusMessage"]["messageId"] == "m2"
    assert script.gets == 3
    r = await watching.call("POST", agent.messages("T1"), {"text": "France"})
    assert r.status == 200, r.raw


async def test_graceful_shutdown_gives_the_lease_back_for_another_gateway_at_once(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted("working", [], final=task_status("working"))
    # A lease far longer than the test: only its release lets the second gateway take over.
    slow_expiry = fast(settings, watch_lease_s=600.0, watch_renew_s=300.0)
    async with aiohttp.ClientSession() as session:
        async with serve_asgi(create_app(slow_expiry)) as base:
            first = Client(base, session)
            agent = await register_fake(first, fake_agent, script)
            await first.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
            await eventually(lambda: script.gets > 0, "the first gateway polls")
            held = (await lease_of(db, "T1"))["watch_token"]
            assert held is not None

        released = await lease_of(db, "T1")
        assert released["watch_token"] is None
        assert released["watch_started_at"] is not None
        asked = script.gets

        async with serve_asgi(create_app(slow_expiry)) as base:
            second = Client(base, session)
            await eventually(lambda: script.gets > asked, "the second gateway polls")
            taken = (await lease_of(db, "T1"))["watch_token"]
            assert taken not in (None, held)
            script.final = task_status("input-required", "Which city?")
            await settles_as(second, agent, "T1", "input-required")
            await watch_ended(db, "T1")


async def test_live_task_left_by_a_start_is_followed_without_returnimmediately(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted("submitted", [task_status("working")], final=task_status("completed"))
    agent = await register_fake(watching, fake_agent, script)

    r = await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})

    assert r.headers["A2A-Task-State"] == "submitted"
    assert "configuration" not in agent.received[0]["params"]
    await settles_as(watching, agent, "T1", "completed")
    logged = await events(watching, agent, "T1")
    assert [(e["type"], e["newState"]) for e in logged] == [
        ("task_created", "submitted"),
        ("task_updated", "working"),
        ("task_updated", "completed"),
    ]
    await watch_ended(db, "T1")
    assert script.gets == 2


async def test_agent_errors_while_polling_are_retried_with_back_off(
    watching: Client, fake_agent: StartFake
) -> None:
    script = Scripted("working", [-32603], final=task_status("input-required", "City?"))

    async def flaky(request: JSON) -> Any:
        if request["method"] == "GetTask" and script.gets == 0:
            script.gets += 1
            return web.Response(status=503)
        return await script(request)

    agent = await register_fake(watching, fake_agent, flaky)
    await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})

    await settles_as(watching, agent, "T1", "input-required")
    assert script.gets == 3
    assert [e["type"] for e in await events(watching, agent, "T1")] == [
        "task_created",
        "task_updated",
    ]


async def test_a_process_follows_no_more_tasks_than_its_concurrency(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    states = {"T1": "working", "T2": "working"}

    async def two_tasks(request: JSON) -> JSON:
        if request["method"] == "GetTask":
            task_id = request["params"]["id"]
            return rpc_result(request, {"id": task_id, "status": task_status(states[task_id], "?")})
        task_id = "T2" if "T1" in started else "T1"
        started.add(task_id)
        return rpc_result(request, task_body("1.0", task_id, "working"))

    started: set[str] = set()
    app = create_app(fast(settings, watch_concurrency=1))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        agent = await register_fake(client, fake_agent, two_tasks)
        for _ in states:
            await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
        await eventually(lambda: calls(agent, "GetTask"), "a poll")
        await asyncio.sleep(0.5)  # several pick-up periods

        leased = await db.fetch("SELECT task_id FROM a2a_tasks WHERE watch_token IS NOT NULL")
        polled = {r["params"]["id"] for r in calls(agent, "GetTask")}
        assert len(leased) == 1 and polled == {leased[0]["task_id"]}
        first = leased[0]["task_id"]
        other = "T2" if first == "T1" else "T1"
        states[first] = "input-required"
        await settles_as(client, agent, first, "input-required")
        polls = lambda: {r["params"]["id"] for r in calls(agent, "GetTask")}  # noqa: E731
        await eventually(lambda: other in polls(), "the other task polled once there is room")
        states[other] = "input-required"
        await settles_as(client, agent, other, "input-required")


@pytest.mark.parametrize(
    ("version", "flag", "sent"),
    [
        ("1.0", True, {"returnImmediately": True}),
        ("1.0", False, {"returnImmediately": False}),
        ("0.3", True, {"blocking": False}),
        ("0.3", False, {"blocking": True}),
    ],
)
async def test_return_immediately_is_sent_in_the_agents_version(
    watching: Client, fake_agent: StartFake, version: str, flag: bool, sent: JSON
) -> None:
    async def asks(request: JSON) -> JSON:
        return rpc_result(request, task_body(version, "T1", "input-required", "C1"))

    body = {"text": "go", "configuration": {"returnImmediately": flag, "historyLength": 2}}
    starts = await register_fake(watching, fake_agent, asks, version)
    continues = await register_fake(watching, fake_agent, asks, version)

    await watching.call("POST", f"/v1/a2a/{starts.id}/messages", body)
    await watching.call("POST", f"/v1/a2a/{continues.id}/messages", {"text": "go"})
    r = await watching.call("POST", continues.messages("T1"), body)

    assert r.status == 200, r.raw
    assert starts.received[0]["params"]["configuration"] == {"historyLength": 2, **sent}
    assert continues.received[1]["params"]["configuration"] == {"historyLength": 2, **sent}


async def test_return_immediately_must_be_a_boolean(
    watching: Client, fake_agent: StartFake
) -> None:
    agent = await register_fake(watching, fake_agent, Scripted("working", []))
    body = {"text": "go", "configuration": {"returnImmediately": "yes"}}

    r = await watching.call("POST", f"/v1/a2a/{agent.id}/messages", body)

    problem = assert_problem(r, 422)
    assert problem["errors"][0]["loc"] == "$.configuration.returnImmediately"
    assert agent.received == []


# ---- settings -----------------------------------------------------------------------------


def test_watch_settings_defaults_and_variables() -> None:
    defaults = load_settings({})
    assert (defaults.watch_concurrency, defaults.watch_max_s) == (100, 86400.0)
    assert (defaults.watch_poll_base_s, defaults.watch_poll_max_s) == (1.0, 30.0)
    assert (defaults.watch_lease_s, defaults.watch_renew_s) == (30.0, 10.0)
    assert defaults.watch_pickup_s == 5.0
    env = {
        "A2AC_WATCH_CONCURRENCY": "7",
        "A2AC_WATCH_MAX_S": "60",
        "A2AC_WATCH_LEASE_S": "4",
        "A2AC_WATCH_RENEW_S": "1",
        "A2AC_WATCH_PICKUP_S": "2",
        "A2AC_WATCH_POLL_BASE_S": "0.5",
        "A2AC_WATCH_POLL_MAX_S": "8",
    }
    read = load_settings(env)
    assert (read.watch_concurrency, read.watch_max_s, read.watch_lease_s) == (7, 60.0, 4.0)
    assert (read.watch_renew_s, read.watch_pickup_s) == (1.0, 2.0)
    assert (read.watch_poll_base_s, read.watch_poll_max_s) == (0.5, 8.0)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"A2AC_WATCH_CONCURRENCY": "0"}, "A2AC_WATCH_CONCURRENCY"),
        ({"A2AC_WATCH_CONCURRENCY": "2.5"}, "A2AC_WATCH_CONCURRENCY"),
        ({"A2AC_WATCH_MAX_S": "-1"}, "A2AC_WATCH_MAX_S"),
        ({"A2AC_WATCH_LEASE_S": "5", "A2AC_WATCH_RENEW_S": "5"}, "A2AC_WATCH_RENEW_S"),
        ({"A2AC_WATCH_POLL_BASE_S": "40"}, "A2AC_WATCH_POLL_BASE_S"),
    ],
)
def test_watch_settings_refuse_unusable_values(env: dict[str, str], names: str) -> None:
    with pytest.raises(SettingsError, match=names):
        load_settings(env)


async def test_a_task_that_cannot_be_followed_does_not_stop_the_watcher(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    broken = await register_fake(
        watching, fake_agent, Scripted("working", []), auth={"type": "bearer", "token": "s3cret"}
    )
    await db.execute(
        "UPDATE a2a_agents SET auth_sealed = $2 WHERE id = $1::uuid", broken.id, b"\x00" * 40
    )
    script = Scripted("working", [], final=task_status("input-required", "City?"))
    healthy = await register_fake(watching, fake_agent, script)

    # Both in one pick-up, the broken one first.
    await db.execute(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, updated_at) VALUES"
        " ($1::uuid, 'B1', 'working', 'alice@example.com', now() - interval '1 min'),"
        " ($2::uuid, 'T1', 'working', 'alice@example.com', now())",
        broken.id,
        healthy.id,
    )

    await settles_as(watching, healthy, "T1", "input-required")
    assert broken.received == []
    assert (await lease_of(db, "B1"))["watch_failed_at"] is None


async def test_a_caller_hands_a_task_over_and_waits_on_its_event_stream(
    watching: Client, fake_agent: StartFake
) -> None:
    script = Scripted(
        "submitted", [task_status("working")], final=task_status("input-required", "City?")
    )
    agent = await register_fake(watching, fake_agent, script)
    task_id, _ = await start_now(watching, agent, "go")
    url = watching.base + agent.task(task_id) + "/events?until=interrupted"
    headers = {"Authorization": f"Bearer {watching.bearer}", "Accept": "text/event-stream"}

    async with watching.session.get(url, headers=headers) as response:
        assert response.status == 200
        streamed = await all_events(response)

    assert [(e.event, e.json()["newState"]) for e in streamed] == [
        ("task_created", "submitted"),
        ("task_updated", "working"),
        ("task_updated", "input-required"),
    ]


@pytest.mark.parametrize(
    ("client_version", "config"),
    [("1.0", {"returnImmediately": True}), ("0.3", {"blocking": False})],
)
async def test_an_a2a_client_can_hand_a_task_to_the_watcher_through_the_facade(
    watching: Client, db: asyncpg.Connection, client_version: str, config: JSON
) -> None:
    async with run_sdk_agent() as sdk:
        agent = await register(watching, sdk.url, "1.0", sdk.received)
        params = (message_v10 if client_version == "1.0" else message_v03)("slow")
        send = "SendMessage" if client_version == "1.0" else "message/send"

        r = await facade_rpc(
            watching, agent.id, send, {**params, "configuration": config}, version=client_version
        )

        assert r.status == 200, r.raw
        assert sdk.received[0]["params"]["configuration"] == {"returnImmediately": True}
        result = r.json()["result"]
        task_id = result["task"]["id"] if client_version == "1.0" else result["id"]
        await eventually(lambda: calls(agent, "GetTask"), "a GetTask")
        sdk.proceed.set()
        await settles_as(watching, agent, task_id, "input-required")
        await watch_ended(db, task_id)


async def test_the_facade_refuses_a_return_immediately_that_is_not_a_boolean(
    watching: Client,
) -> None:
    async with run_sdk_agent() as sdk:
        agent = await register(watching, sdk.url, "1.0", sdk.received)
        params = {**message_v10("slow"), "configuration": {"returnImmediately": "yes"}}

        r = await facade_rpc(watching, agent.id, "SendMessage", params, version="1.0")

    error = r.json()["error"]
    assert error["code"] == -32602
    assert "returnImmediately" in error["message"]
    assert sdk.received == []
