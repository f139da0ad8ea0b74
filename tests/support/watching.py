"""A watcher quick enough for tests, and waits on what it stores: a task's state, its lease."""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec

from a2a_continue.settings import Settings
from tests.support.agents import Agent
from tests.support.client import Client
from tests.support.waiting import eventually


def fast(settings: Settings, **changes: Any) -> Settings:
    """The test settings with a watcher quick enough for tests."""
    values: dict[str, Any] = {
        "watch_poll_base_s": 0.05,
        "watch_poll_max_s": 0.2,
        "watch_pickup_s": 0.2,
        "watch_lease_s": 2.0,
        "watch_renew_s": 0.5,
        **changes,
    }
    return msgspec.structs.replace(settings, **values)


async def stored_state(client: Client, agent: Agent, task_id: str) -> str:
    r = await client.call("GET", agent.task(task_id))
    assert r.status == 200, r.raw
    state: str = r.json()["state"]
    return state


async def settles_as(client: Client, agent: Agent, task_id: str, state: str) -> None:
    async def reached() -> bool:
        return await stored_state(client, agent, task_id) == state

    await eventually(reached, f"task {task_id} stored as {state}")


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
