"""Cancel answered with another task than the one asked about."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

from tests.conftest import Client, FakeAgent, Handler, register
from tests.support.hardening import Scripted, task_v10

StartFake = Callable[[Handler], Awaitable[FakeAgent]]


async def test_cancel_answered_with_another_tasks_id_is_502_and_leaves_the_task(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    script = Scripted(cancel=lambda r: task_v10("T2", "canceled"))
    fake = await fake_agent(script)
    agent = await register(client, fake.url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    before = [dict(row) for row in await db.fetch("SELECT * FROM a2a_tasks")]

    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/cancel")

    assert r.status == 502, r.raw
    assert r.headers["Content-Type"].startswith("application/problem+json")
    assert "'T2'" in r.json()["detail"]
    assert [dict(row) for row in await db.fetch("SELECT * FROM a2a_tasks")] == before
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 1
