"""A multi-host database URL rides through a failover: the gateway started on a primary and
its streaming standby, the primary stopped, the standby promoted."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial

import aiohttp
import asyncpg
import pytest

from a2a_continue.app import create_app
from a2a_continue.core.access.callers import Caller
from a2a_continue.core.schema import migrate_url
from a2a_continue.core.tasks.claims import take_claim
from a2a_continue.runtime.secrets import new_key
from a2a_continue.settings import Settings
from tests.runtime.test_database_restarts import (
    DB_TIMEOUT_S,
    Load,
    asks_again,
    assert_no_500,
    every_route,
)
from tests.support.agents import register_fake
from tests.support.client import JWT_SECRET, Client
from tests.support.database import insert_agent
from tests.support.fakes import Scripted, StartFake
from tests.support.own_postgres import OwnPostgres
from tests.support.servers import serve_asgi
from tests.support.standby import Standby, multi_host_url, primary_and_standby
from tests.support.waiting import eventually

WRITERS = 3


async def listen_sessions(server: OwnPostgres) -> int | None:
    """How many sessions on ``server`` last ran a LISTEN (the hub's connection, idle)."""
    conn = await asyncpg.connect(server.url)
    try:
        found = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()"
        )
        return int(found) or None
    finally:
        await conn.close()


async def replayed(standby: Standby, lsn: str) -> bool:
    """Whether ``standby`` has replayed the WAL up to ``lsn``."""
    conn = await asyncpg.connect(standby.url)
    try:
        return bool(await conn.fetchval("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn))
    finally:
        await conn.close()


@pytest.fixture
async def pair() -> AsyncIterator[tuple[OwnPostgres, Standby]]:
    """A migrated primary streaming to a running standby."""
    with primary_and_standby() as (primary, standby):
        await primary.start()
        await migrate_url(multi_host_url(primary, standby))
        await asyncio.to_thread(standby.clone, primary)
        await standby.start()
        yield primary, standby


async def test_writes_resume_on_the_promoted_standby_without_a_500(
    pair: tuple[OwnPostgres, Standby], fake_agent: StartFake
) -> None:
    primary, standby = pair
    settings = Settings(
        database_url=multi_host_url(primary, standby),
        jwt_secret=JWT_SECRET,
        encryption_key=new_key(),
        db_timeout_s=DB_TIMEOUT_S,
        agent_timeout_s=30.0,
        pool_size=4,
    )
    async with serve_asgi(create_app(settings)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        agent = await register_fake(client, fake_agent, Scripted(asks_again, asks_again))
        load = Load(client, agent)
        task_id = await load.start()
        assert task_id is not None
        workers = [asyncio.create_task(load.writer()) for _ in range(WRITERS)]
        workers.append(asyncio.create_task(load.reader(task_id)))
        try:
            began = time.monotonic()
            await eventually(partial(every_route, load, 200, began), "writes on the primary")
            await eventually(lambda: listen_sessions(primary), "the hub listens on the primary")
            await primary.stop()
            await standby.promote()
            promoted = time.monotonic()
            await eventually(partial(every_route, load, 200, promoted), "writes resume")
            await eventually(lambda: listen_sessions(standby), "the hub follows the primary")
        finally:
            load.stopping.set()
            await asyncio.gather(*workers)

    assert_no_500(load)


async def test_a_claim_held_at_a_failover_still_holds_the_task_on_the_promoted_standby(
    pair: tuple[OwnPostgres, Standby],
) -> None:
    primary, standby = pair
    caller = Caller(sub="alice@example.com")
    conn = await asyncpg.connect(primary.url)
    try:
        agent_id = await insert_agent(conn)
        await conn.execute(
            "INSERT INTO a2a_tasks (agent_id, task_id, state, owner)"
            " VALUES ($1, 't-1', 'input-required', 'alice@example.com')",
            agent_id,
        )
        held = uuid.uuid4()
        taken = await take_claim(
            conn, caller, agent_id, "t-1", None, held, timeout_s=600, margin_s=5
        )
        assert taken is not None and taken["claimed"]
        written = await conn.fetchval("SELECT pg_current_wal_lsn()")
    finally:
        conn.terminate()
    await eventually(partial(replayed, standby, written), "the standby replays the claim's WAL")
    await asyncio.to_thread(primary.kill)  # an immediate stop, as a crash
    await standby.promote()
    conn = await asyncpg.connect(standby.url)
    try:
        assert await conn.fetchval("SELECT token FROM a2a_claims") == held
        other = await take_claim(
            conn, caller, agent_id, "t-1", None, uuid.uuid4(), timeout_s=600, margin_s=5
        )
        assert other is not None and not other["claimed"]
    finally:
        await conn.close()
