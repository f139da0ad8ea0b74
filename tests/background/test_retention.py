"""The retention loop of a running gateway: with A2AC_RETENTION_DAYS set, old terminal tasks go."""

from __future__ import annotations

import aiohttp
import asyncpg
import msgspec

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.client import Client
from tests.support.database import insert_agent
from tests.support.metrics import scrape
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually


async def add_task(db: asyncpg.Connection, agent: object, task_id: str, days_ago: int) -> None:
    await db.execute(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, completed_at)"
        " VALUES ($1, $2, 'completed', 'alice@example.com', now() - make_interval(days => $3))",
        agent,
        task_id,
        days_ago,
    )


async def task_ids(db: asyncpg.Connection) -> set[str]:
    return {r["task_id"] for r in await db.fetch("SELECT task_id FROM a2a_tasks")}


async def test_a_gateway_with_retention_days_prunes_old_terminal_tasks_and_counts_them(
    settings: Settings, db: asyncpg.Connection
) -> None:
    agent = await insert_agent(db)
    await add_task(db, agent, "old", 40)
    await add_task(db, agent, "recent", 2)
    app = create_app(msgspec.structs.replace(settings, retention_days=30.0))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as http:
        client = Client(base, http)

        async def pruned() -> bool:
            return await task_ids(db) == {"recent"}

        async def counted() -> bool:
            samples = await scrape(client)
            return samples.get(("a2ac_pruned_tasks_total", frozenset()), 0) >= 1

        await eventually(pruned)
        # The run is counted when it ends (after the tasks, it prunes the contexts they left).
        await eventually(counted, "the run counted what it deleted")
