"""The watcher (SPEC §8.4): live tasks are followed to their next settled state by themselves."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import asyncpg
import msgspec
import pytest

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.conftest import Client
from tests.sdk_agent import run_sdk_agent
from tests.servers import serve_asgi
from tests.test_continue import (
    BUSY_TYPE,
    Agent,
    StartFake,
    assert_problem,
    events,
    register,
    register_fake,
    rpc_error,
    rpc_result,
    task_body,
)

JSON = dict[str, Any]
T = TypeVar("T")
GET_TASK = {"1.0": "GetTask", "0.3": "tasks/get"}
RETURN_NOW = {"configuration": {"returnImmediately": True}}


def fast(settings: Settings, **changes: Any) -> Settings:
    """The test settings with a watcher quick enough for tests."""
    values: JSON = {
        "watch_poll_base_s": 0.05,
        "watch_poll_max_s": 0.2,
        "watch_pickup_s": 0.2,
        "watch_lease_s": 2.0,
        "watch_renew_s": 0.5,
        **changes,
    }
    return msgspec.structs.replace(settings, **values)


@pytest.fixture
async def watching(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    """A client of a gateway whose watcher polls every few tens of milliseconds."""
    async with serve_asgi(create_app(fast(settings))) as base, aiohttp.ClientSession() as s:
        yield Client(base, s)


async def eventually(check: Callable[[], Awaitable[T | None] | T | None], what: str) -> T:
    """Wait until ``check`` returns something (the watcher works in the background)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = check()
        if inspect.isawaitable(found):
            found = await found
        if found is not None and found is not False:
            return found
        await asyncio.sleep(0.02)
    pytest.fail(f"never happened: {what}")


async def stored_state(client: Client, agent: Agent, task_id: str) -> str:
    r = await client.call("GET", agent.task(task_id))
    assert r.status == 200, r.raw
    state: str = r.json()["state"]
    return state


async def settles_as(client: Client, agent: Agent, task_id: str, state: str) -> None:
    async def reached() -> bool:
        return await stored_state(client, agent, task_id) == state

    await eventually(reached, f"task {task_id} stored as {state}")


def calls(agent: Agent, method: str) -> list[JSON]:
    return [r for r in agent.received if r.get("method") == method]


async def start_now(client: Client, agent: Agent, text: str) -> tuple[str, str]:
    """Start with returnImmediately; return the task id and the state the answer showed."""
    r = await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": text, **RETURN_NOW})
    assert r.status == 200, r.raw
    result = r.json()["result"]
    task = result.get("task", result)
    return task["id"], r.headers["A2A-Task-State"]


async def lease_of(db: asyncpg.Connection, task_id: str) -> asyncpg.Record:
    row = await db.fetchrow(
        "SELECT watch_token, watch_expires_at, watch_started_at, watch_past, watch_failed_at"
        " FROM a2a_tasks WHERE task_id = $1",
        task_id,
    )
    assert row is not None
    return row


async def watch_ended(db: asyncpg.Connection, task_id: str) -> None:
    async def ended() -> bool:
        return (await lease_of(db, task_id))["watch_token"] is None

    await eventually(ended, f"the watch of {task_id} ended")


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
    assert {e["actor"] for e in updates} == {"watcher"}
    assert (updates[-1]["newState"], updates[-1]["data"]) == ("input-required", {"source": "poll"})
    assert not calls(agent, "SendMessage")[1:] and not calls(agent, "message/send")[1:]


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


def status(state: str, text: str | None = None, message_id: str | None = None) -> JSON:
    out: JSON = {"state": "TASK_STATE_" + state.upper().replace("-", "_")}
    if text is not None:
        out["message"] = {
            "messageId": message_id or text,
            "role": "ROLE_AGENT",
            "parts": [{"text": text}],
        }
    return out


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
        "watcher",
    )
    assert await stored_state(watching, agent, "T1") == "working"
    assert (await lease_of(db, "T1"))["watch_failed_at"] is not None
    await asyncio.sleep(0.6)  # three pick-up periods: a given-up task is not taken again
    assert script.gets == 1
    assert [e["type"] for e in await events(watching, agent, "T1")] == [
        "task_created",
        "task_watch_failed",
    ]


async def test_watch_longer_than_the_limit_ends_with_watch_expired(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted("working", [], final=status("working"))
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
    script = Scripted("working", [], final=status("working"))
    script.hold = asyncio.Event()
    agent = await register_fake(watching, fake_agent, script)
    await watching.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})
    await eventually(lambda: script.gets, "a GetTask")

    r = await watching.call("DELETE", f"/v1/a2a/agents/{agent.id}")
    assert r.status == 204
    script.hold.set()
    await asyncio.sleep(0.6)  # several poll periods

    assert script.gets == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 0


async def test_return_immediately_follow_up_waits_past_the_status_it_was_answered_with(
    watching: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    asked = status("input-required", "Which city?", "m1")
    # The agent answers the send with the task's previous status, reports it once more when
    # asked, then works, then asks again with a new message.
    script = Scripted(
        "input-required",
        [asked, status("working"), status("input-required", "Which country?", "m2")],
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
