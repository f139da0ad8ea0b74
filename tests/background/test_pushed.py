"""Push in (SPEC §19): a task of an agent that pushes is followed by its pushes, not polls."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import httpx
import pytest

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.agents import Agent, events, register
from tests.support.client import Client
from tests.support.ports import free_port
from tests.support.push import add_config, fast_push
from tests.support.receiver import Receiver, push_receiver
from tests.support.sdk_agent import SdkAgent, run_sdk_agent
from tests.support.servers import serve_asgi
from tests.support.sse_client import events as sse_events
from tests.support.waiting import eventually
from tests.support.watching import fast, settles_as, watch_ended

JSON = dict[str, Any]
GET_TASK = {"1.0": "GetTask", "0.3": "tasks/get"}
INLINE = {"1.0": "taskPushNotificationConfig", "0.3": "pushNotificationConfig"}
RETURN_NOW = {"configuration": {"returnImmediately": True}}
PUSHES = {"streaming": False, "pushNotifications": True}
CHECK_S = 1.0


async def gateway(settings: Settings, **changes: Any) -> Any:
    """A gateway whose public URL is its own loopback address, and a client of it."""
    port = free_port()
    configured = fast_push(
        fast(settings, public_url=f"http://127.0.0.1:{port}", push_in_check_s=CHECK_S, **changes)
    )
    return serve_asgi(create_app(configured), port=port)


@pytest.fixture
async def pushed(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    async with await gateway(settings) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


def calls(agent: Agent, method: str) -> list[JSON]:
    return [r for r in agent.received if r.get("method") == method]


async def start_now(client: Client, agent: Agent) -> str:
    r = await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go", **RETURN_NOW})
    assert r.status == 200, r.raw
    result = r.json()["result"]
    task_id: str = result.get("task", result)["id"]
    return task_id


async def updates(client: Client, agent: Agent, task_id: str) -> list[JSON]:
    return [e for e in await events(client, agent, task_id) if e["type"] == "task_updated"]


async def step(client: Client, sdk: SdkAgent, agent: Agent, task_id: str, what: str) -> None:
    """Have the agent take one step; wait until the gateway recorded it."""
    before = len(await updates(client, agent, task_id))
    sdk.steps.put_nowait(what)

    async def recorded() -> bool:
        return len(await updates(client, agent, task_id)) > before

    await eventually(recorded, f"step {what!r} recorded")


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_pushing_agents_task_is_recorded_change_by_change_from_its_pushes(
    pushed: Client, db: asyncpg.Connection, version: str
) -> None:
    async with run_sdk_agent(push="store") as sdk:
        agent = await register(pushed, sdk.url, version, sdk.received, capabilities=PUSHES)
        began = time.monotonic()
        task_id = await start_now(pushed, agent)

        given = sdk.received[0]["params"]["configuration"][INLINE[version]]
        assert given["url"] == f"{pushed.base}/v1/a2a/push-in/{given['id']}"
        assert len(given["token"]) >= 32
        if version == "1.0":
            assert given["authentication"] == {"scheme": "Bearer", "credentials": given["token"]}
        await eventually(lambda: db.fetchval(
            "SELECT pushes > 0 FROM a2a_push_in WHERE id = $1::uuid", given["id"]
        ), "a first push")  # fmt: skip
        for what in ("step 1", "step 2", "art draft"):
            await step(pushed, sdk, agent, task_id, what)
        sdk.steps.put_nowait("done")
        await settles_as(pushed, agent, task_id, "completed")
        elapsed = time.monotonic() - began
        await watch_ended(db, task_id)
        gets = calls(agent, GET_TASK[version])

    assert len(gets) <= elapsed / CHECK_S + 1, (len(gets), elapsed)
    logged = await updates(pushed, agent, task_id)
    assert {e["data"]["source"] for e in logged} == {"push"}
    assert {e["actor"] for e in logged} == {"a2a-continue"}
    seqs = [e["seq"] for e in logged]
    assert seqs == sorted(seqs)
    changes = [(e["newState"], e["data"].get("artifactIds")) for e in logged]
    assert changes[-1][0] == "completed"
    assert ("working", ["draft"]) in changes
    stored = (await pushed.call("GET", agent.task(task_id))).json()
    assert [a["artifactId"] for a in stored["artifacts"]] == ["draft", "forecast"]


async def test_a_repeated_push_records_nothing(pushed: Client, db: asyncpg.Connection) -> None:
    async with run_sdk_agent(push="store") as sdk:
        agent = await register(pushed, sdk.url, "1.0", sdk.received, capabilities=PUSHES)
        task_id = await start_now(pushed, agent)
        given = sdk.received[0]["params"]["configuration"][INLINE["1.0"]]
        await step(pushed, sdk, agent, task_id, "step 1")
        stored = (await pushed.call("GET", agent.task(task_id))).json()
        body = {
            "task": {
                "id": task_id,
                "contextId": stored["contextId"],
                "status": {"state": "TASK_STATE_WORKING", "message": stored["statusMessage"]},
            }
        }
        before = await events(pushed, agent, task_id)
        for _ in range(2):
            r = await pushed.call(
                "POST",
                f"/v1/a2a/push-in/{given['id']}",
                body,
                bearer=None,
                headers={"X-A2A-Notification-Token": given["token"]},
            )
            assert r.status == 204, r.raw
        assert await events(pushed, agent, task_id) == before
        sdk.steps.put_nowait("done")
        await settles_as(pushed, agent, task_id, "completed")


async def test_the_live_stream_and_a_clients_push_config_see_the_pushed_changes(
    pushed: Client, db: asyncpg.Connection
) -> None:
    receiver: Receiver
    async with (
        run_sdk_agent(push="store") as sdk,
        push_receiver() as receiver,
    ):
        agent = await register(pushed, sdk.url, "1.0", sdk.received, capabilities=PUSHES)
        task_id = await start_now(pushed, agent)
        await add_config(pushed, agent.id, task_id, url=receiver.url)
        headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {pushed.bearer}"}
        url = f"{pushed.base}{agent.task(task_id)}/events"
        async with pushed.session.get(url, headers=headers) as stream:
            assert stream.status == 200
            sdk.steps.put_nowait("step 1")
            sdk.steps.put_nowait("done")
            seen = [e.json() async for e in sse_events(stream)]
        pushed_events = [e for e in seen if e["type"] == "task_updated"]
        assert pushed_events and {e["data"]["source"] for e in pushed_events} == {"push"}
        assert seen[-1]["newState"] == "completed"

        def delivered_completed() -> bool:
            return any(
                d.body.get("statusUpdate", {}).get("status", {}).get("state")
                == "TASK_STATE_COMPLETED"
                for d in receiver.ok()
            )

        await eventually(delivered_completed, "the completion pushed out to the client")


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_an_agent_that_refuses_the_config_is_polled(
    pushed: Client, db: asyncpg.Connection, version: str
) -> None:
    async with run_sdk_agent(push="refuse") as sdk:
        agent = await register(pushed, sdk.url, version, sdk.received, capabilities=PUSHES)
        task_id = await start_now(pushed, agent)
        # The agent ignored the inline config: the first check finds a change no push brought.
        sdk.steps.put_nowait("step 1")
        await eventually(lambda: len(calls(agent, GET_TASK[version])) >= 3, "polls")
        sdk.steps.put_nowait("done")
        await settles_as(pushed, agent, task_id, "completed")
    logged = await updates(pushed, agent, task_id)
    assert {e["data"]["source"] for e in logged} == {"poll"}


async def started_elsewhere(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent
) -> tuple[Agent, str]:
    """Start a task on an agent the gateway does not know pushes, then learn it does and let
    the watcher pick the task up again (as after a restart)."""
    agent = await register(client, sdk.url, "1.0", sdk.received)
    task_id = await start_now(client, agent)
    await db.execute(
        "UPDATE a2a_agents SET capabilities = $1::jsonb WHERE id = $2::uuid", PUSHES, agent.id
    )
    await db.execute(
        "UPDATE a2a_tasks SET watch_token = NULL, watch_expires_at = NULL WHERE task_id = $1",
        task_id,
    )
    return agent, task_id


async def test_a_watcher_pick_up_gives_the_config_through_create_config(
    pushed: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent(push="store") as sdk:
        agent, task_id = await started_elsewhere(pushed, db, sdk)
        asked = await eventually(
            lambda: calls(agent, "CreateTaskPushNotificationConfig") or None, "a config"
        )
        created = asked[0]["params"]
        assert created["taskId"] == task_id
        assert created["url"] == f"{pushed.base}/v1/a2a/push-in/{created['id']}"
        assert created["authentication"] == {"scheme": "Bearer", "credentials": created["token"]}
        await eventually(lambda: db.fetchval(
            "SELECT accepted_at IS NOT NULL FROM a2a_push_in WHERE id = $1::uuid", created["id"]
        ), "the config taken")  # fmt: skip
        await step(pushed, sdk, agent, task_id, "step 1")
        sdk.steps.put_nowait("done")
        await settles_as(pushed, agent, task_id, "completed")
        deleted = await eventually(
            lambda: calls(agent, "DeleteTaskPushNotificationConfig") or None, "the config deleted"
        )
    assert deleted[0]["params"] == {"taskId": task_id, "id": created["id"]}
    assert (await updates(pushed, agent, task_id))[-1]["data"]["source"] == "push"


async def test_an_agent_that_refuses_create_config_is_polled_and_not_asked_again(
    pushed: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent(push="refuse") as sdk:
        agent, task_id = await started_elsewhere(pushed, db, sdk)
        await eventually(
            lambda: calls(agent, "CreateTaskPushNotificationConfig") or None, "a config offered"
        )
        refused = "SELECT refused_at IS NOT NULL FROM a2a_push_in WHERE task_id = $1"
        await eventually(lambda: db.fetchval(refused, task_id), "the config refused")
        polled = len(calls(agent, "GetTask"))
        await eventually(lambda: len(calls(agent, "GetTask")) >= polled + 3, "polls")
        sdk.steps.put_nowait("done")
        await settles_as(pushed, agent, task_id, "completed")
    assert len(calls(agent, "CreateTaskPushNotificationConfig")) == 1
    assert (await updates(pushed, agent, task_id))[-1]["data"]["source"] == "poll"


async def test_a_push_that_fails_verification_sends_the_task_back_to_polling(
    pushed: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent(push="store") as sdk:
        agent = await register(pushed, sdk.url, "1.0", sdk.received, capabilities=PUSHES)
        task_id = await start_now(pushed, agent)
        given = sdk.received[0]["params"]["configuration"][INLINE["1.0"]]
        await step(pushed, sdk, agent, task_id, "step 1")
        r = await pushed.call(
            "POST",
            f"/v1/a2a/push-in/{given['id']}",
            {"task": {"id": task_id, "status": {"state": "TASK_STATE_COMPLETED"}}},
            bearer=None,
            headers={"X-A2A-Notification-Token": "forged"},
        )
        assert r.status == 401
        polled = len(calls(agent, "GetTask"))
        await eventually(lambda: len(calls(agent, "GetTask")) >= polled + 3, "polls")
        sdk.steps.put_nowait("done")
        await settles_as(pushed, agent, task_id, "completed")


SDK03 = Path(__file__).parent.parent / "support" / "sdk03"
SDK03_PY = SDK03 / ".venv" / "bin" / "python"


@contextlib.asynccontextmanager
async def sdk03_agent() -> AsyncIterator[str]:
    """Run the a2a-sdk 0.3 agent that pushes (tests/support/sdk03/push_agent.py); yield its URL."""
    process = await asyncio.create_subprocess_exec(
        str(SDK03_PY), str(SDK03 / "push_agent.py"), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        url = f"http://127.0.0.1:{int(line.split()[1])}/"
        async with httpx.AsyncClient() as probe:

            async def up() -> bool:
                try:
                    return (await probe.get(url + "control/received")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(up, "the 0.3 agent listening")
        yield url
    finally:
        process.terminate()
        await process.wait()


@pytest.mark.skipif(not SDK03_PY.exists(), reason="a2a-sdk 0.3 is not installed: make sdk03-client")
async def test_a_0_3_sdk_agent_pushes_its_whole_task_and_is_not_polled(
    pushed: Client, db: asyncpg.Connection
) -> None:
    async with sdk03_agent() as url, httpx.AsyncClient(base_url=url) as control:
        agent = await register(pushed, url, "0.3", [], capabilities=PUSHES)
        began = time.monotonic()
        task_id = await start_now(pushed, agent)
        for what in ("step 1", "art draft", "step 2"):
            before = len(await updates(pushed, agent, task_id))
            await control.post("control/step", content=what)

            async def recorded(before: int = before) -> bool:
                return len(await updates(pushed, agent, task_id)) > before

            await eventually(recorded, f"step {what!r} recorded")
        await control.post("control/step", content="done")
        await settles_as(pushed, agent, task_id, "completed")
        elapsed = time.monotonic() - began
        methods = (await control.get("control/received")).json()

    assert methods[0] == "message/send"
    assert methods.count("tasks/get") <= elapsed / CHECK_S + 1, (methods, elapsed)
    logged = await updates(pushed, agent, task_id)
    assert {e["data"]["source"] for e in logged} == {"push"}
    stored = (await pushed.call("GET", agent.task(task_id))).json()
    assert [a["artifactId"] for a in stored["artifacts"]] == ["draft", "forecast"]


async def test_a_refresh_of_a_live_task_gives_the_agent_a_config(
    pushed: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent(push="store") as sdk:
        agent = await register(pushed, sdk.url, "1.0", sdk.received)
        task_id = await start_now(pushed, agent)
        await db.execute(
            "UPDATE a2a_agents SET capabilities = $1::jsonb WHERE id = $2::uuid", PUSHES, agent.id
        )
        r = await pushed.call("GET", agent.task(task_id) + "?refresh=true")
        assert r.status == 200, r.raw
        asked = await eventually(
            lambda: calls(agent, "CreateTaskPushNotificationConfig") or None, "a config"
        )
        config = asked[0]["params"]["id"]
        await eventually(lambda: db.fetchval(
            "SELECT accepted_at IS NOT NULL FROM a2a_push_in WHERE id = $1::uuid", config
        ), "the config taken")  # fmt: skip
        sdk.steps.put_nowait("done")
        await settles_as(pushed, agent, task_id, "completed")
        pushed_once = "SELECT pushes > 0 FROM a2a_push_in WHERE id = $1::uuid"
        await eventually(lambda: db.fetchval(pushed_once, config), "a push")
