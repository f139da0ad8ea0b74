"""Bounded database waits: a database that hangs is a 503 with Retry-After within the bound."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Awaitable

import aiohttp
import asyncpg
import msgspec
import pytest

from a2a_continue.app import create_app
from a2a_continue.errors import DatabaseUnavailable, NotFound
from a2a_continue.runtime.db import HeldConnections, create_pool, usable
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.secrets import Sealer, decode_key
from a2a_continue.settings import Settings
from tests.support.client import Client, Response, register
from tests.support.database import TASKS_WITH_CLAIMS, direct_url
from tests.support.db_faults import FaultyDatabase, faulty_database
from tests.support.fakes import JSON, Scripted, StartFake, rpc_result
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually

BOUND_S = 0.5


@pytest.fixture
async def quick(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    """A gateway whose database waits are bounded by half a second."""
    bounded = msgspec.structs.replace(settings, db_timeout_s=BOUND_S)
    async with serve_asgi(create_app(bounded)) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


async def locked(db: asyncpg.Connection, tables: str) -> asyncpg.transaction.Transaction:
    """Hold an exclusive lock on ``tables`` until the returned transaction ends."""
    transaction = db.transaction()
    await transaction.start()
    await db.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")
    return transaction


async def assert_503(call: Awaitable[Response]) -> None:
    r = await asyncio.wait_for(call, 30)
    assert r.status == 503, r.raw
    assert r.headers["Retry-After"]
    assert r.json()["type"].endswith(":database-unavailable")


async def test_every_route_answers_503_while_a_lock_holds_its_tables(
    quick: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(Scripted())
    agent = await register(quick, fake.url)
    r = await quick.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    task = f"/v1/a2a/{agent}/tasks/T1"
    body = {"name": "n", "endpointUrl": "http://127.0.0.1:9/", "protocolVersion": "1.0"}

    transaction = await locked(db, "a2a_agents, a2a_tasks, a2a_task_events")
    try:
        await assert_503(quick.call("GET", "/v1/a2a/agents"))
        await assert_503(quick.call("POST", "/v1/a2a/agents", body))
        await assert_503(quick.call("GET", f"/v1/a2a/agents/{agent}"))
        await assert_503(quick.call("PATCH", f"/v1/a2a/agents/{agent}", {"name": "m"}))
        await assert_503(quick.call("DELETE", f"/v1/a2a/agents/{agent}"))
        await assert_503(quick.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"}))
        await assert_503(quick.call("GET", f"/v1/a2a/{agent}/tasks"))
        await assert_503(quick.call("GET", task))
        await assert_503(quick.call("GET", task + "/events"))
        await assert_503(quick.call("POST", task + "/messages", {"text": "x"}))
        await assert_503(quick.call("POST", task + "/cancel"))
    finally:
        await transaction.rollback()

    assert len(fake.received) == 1
    claim = await db.fetchval(f"SELECT token FROM {TASKS_WITH_CLAIMS}")
    assert claim is None
    r = await quick.call("POST", task + "/messages", {"text": "x"})
    assert r.status == 200, r.raw


async def test_a_follow_up_whose_event_log_hangs_still_answers_and_releases_its_claim(
    quick: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    locker: list[asyncpg.transaction.Transaction] = []
    start_answer = Scripted()

    async def lock_then_answer(request: JSON) -> object:
        if "taskId" not in request["params"]["message"]:
            return await start_answer(request)
        # The agent has the message; now the event log stops answering.
        locker.append(await locked(db, "a2a_task_events"))
        return rpc_result(
            request, {"task": {"id": "T1", "status": {"state": "TASK_STATE_COMPLETED"}}}
        )

    fake = await fake_agent(lock_then_answer)
    agent = await register(quick, fake.url)
    r = await quick.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    try:
        r = await asyncio.wait_for(
            quick.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "x"}), 30
        )
    finally:
        await locker[0].rollback()
    assert r.status == 200, r.raw
    row = await db.fetchrow(f"SELECT state, token AS claim_token FROM {TASKS_WITH_CLAIMS}")
    assert row is not None
    assert (row["state"], row["claim_token"]) == ("completed", None)


async def test_waiting_for_a_pooled_connection_is_bounded(settings: Settings) -> None:
    assert settings.database_url
    pool = await create_pool(
        settings.database_url, 1, timeout_s=BOUND_S, statement_cache=settings.db_statement_cache
    )
    bounded = msgspec.structs.replace(settings, db_timeout_s=BOUND_S)
    async with aiohttp.ClientSession() as session:
        gw = Gateway(bounded, pool, session, Sealer(decode_key(settings.encryption_key)))
        # The pool's one connection is held outside any loan (a loan that outlives its own
        # bound loses its connection, which would let the waiter in).
        taken = await pool.acquire()
        try:
            with pytest.raises(DatabaseUnavailable) as refused:
                async with asyncio.timeout(30), gw.connection():
                    pass
        finally:
            await pool.release(taken)
            await pool.close()
    assert refused.value.headers["Retry-After"]


async def test_a_statement_that_outlives_the_bound_is_a_503_and_is_cancelled_on_the_server(
    settings: Settings, db: asyncpg.Connection
) -> None:
    assert settings.database_url
    pool = await create_pool(
        settings.database_url, 1, timeout_s=BOUND_S, statement_cache=settings.db_statement_cache
    )
    held = HeldConnections(pool, 1)
    bounded = msgspec.structs.replace(settings, db_timeout_s=BOUND_S)
    async with aiohttp.ClientSession() as session:
        gw = Gateway(bounded, pool, session, Sealer(decode_key(settings.encryption_key)), held=held)
        try:
            with pytest.raises(DatabaseUnavailable):
                async with asyncio.timeout(30), gw.connection() as conn:
                    await conn.execute("SELECT pg_sleep(60) /* a2ac-loan-test */")
            await eventually(
                lambda: none_running(db, "a2ac-loan-test"),
                "the statement ended on the server",
                within_s=10,
            )

            # The next loan (another request: not under the first one's back-off) gets a
            # connection that answers, never one still busy with the cancelled statement.
            async def next_loan() -> int:
                async with gw.connection() as again:
                    answer: int = await again.fetchval("SELECT 1")
                    return answer

            assert await asyncio.create_task(next_loan(), context=contextvars.Context()) == 1
        finally:
            await gw.stop_chores()
            await held.close()
            await pool.close()


async def none_running(db: asyncpg.Connection, tag: str) -> bool:
    running = await db.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
        " AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
        tag,
    )
    return bool(running == 0)


# ---- a server that stops: its goodbye read between statements, statements cut while frozen --


@pytest.fixture
async def proxied(settings: Settings) -> AsyncIterator[tuple[Gateway, FaultyDatabase]]:
    """A gateway whose one pooled connection reaches PostgreSQL through the fault proxy."""
    assert settings.database_url
    async with (
        faulty_database(direct_url(settings.database_url)) as proxy,
        aiohttp.ClientSession() as session,
    ):
        pool = await create_pool(proxy.url, 1, timeout_s=BOUND_S, statement_cache=100)
        held = HeldConnections(pool, 1)
        bounded = msgspec.structs.replace(settings, db_timeout_s=BOUND_S)
        sealer = Sealer(decode_key(settings.encryption_key))
        gw = Gateway(bounded, pool, session, sealer, held=held)
        try:
            yield gw, proxy
        finally:
            proxy.set("up")
            await gw.stop_chores()
            await held.close()
            pool.terminate()


async def backend_pid(gw: Gateway) -> int:
    """The server process behind the connection a new request's loan gets."""

    async def loan() -> int:
        async with gw.connection() as conn:
            pid: int = await conn.fetchval("SELECT pg_backend_pid()")
            return pid

    # A task of its own: another request, not under an earlier one's back-off.
    return await asyncio.create_task(loan(), context=contextvars.Context())


async def test_a_connection_that_read_the_servers_goodbye_is_a_503_and_never_lent_again(
    proxied: tuple[Gateway, FaultyDatabase], db: asyncpg.Connection
) -> None:
    gw, proxy = proxied
    first = await backend_pid(gw)
    # The stop's error reaches the idle connection, its close does not; the test's own round
    # trip to the server lets the gateway's loop read that error meanwhile.
    proxy.say_goodbye()
    await db.fetchval("SELECT 1")

    with pytest.raises(DatabaseUnavailable) as refused:
        await backend_pid(gw)

    assert refused.value.headers["Retry-After"]
    # Bytes flow again on every socket still open: a connection lent again would fail now.
    proxy.set("up")
    assert await backend_pid(gw) != first
    assert gw.held is not None and gw.held.out == 1


async def test_a_statement_the_bound_cut_on_a_frozen_server_leaves_no_connection_to_reuse(
    proxied: tuple[Gateway, FaultyDatabase],
) -> None:
    gw, proxy = proxied
    first = await backend_pid(gw)
    proxy.set("frozen")
    with pytest.raises(DatabaseUnavailable):
        await asyncio.wait_for(backend_pid(gw), 30)
    # The server stops while the cut statement's cancel is still on its way, then starts.
    proxy.say_goodbye()
    proxy.set("down")
    proxy.set("up")

    assert await backend_pid(gw) != first
    assert gw.held is not None and gw.held.out == 1


async def test_any_error_of_a_statement_the_bound_cut_is_a_503_not_an_internal_error(
    settings: Settings,
) -> None:
    # When the bound ends a loan's connection mid-statement, asyncpg's torn-down protocol may
    # raise an error of its own (an AttributeError on its vanished transport) instead of a
    # connection error: that is the bound too. A refusal of the block's own stays what it is.
    assert settings.database_url
    pool = await create_pool(settings.database_url, 1, statement_cache=settings.db_statement_cache)
    bounded = msgspec.structs.replace(settings, db_timeout_s=BOUND_S)

    async def cut(gw: Gateway, error: Exception) -> None:
        async with asyncio.timeout(30), gw.connection() as conn:
            await eventually(lambda: not usable(conn), "the bound ended the connection")
            raise error

    async with aiohttp.ClientSession() as session:
        gw = Gateway(bounded, pool, session, Sealer(decode_key(settings.encryption_key)))
        try:
            torn = AttributeError("'NoneType' object has no attribute 'bind_execute'")
            # Each loan in a context of its own: a cut loan makes its request's next ones fail
            # at once.
            loop = asyncio.get_running_loop()
            with pytest.raises(DatabaseUnavailable) as refused:
                await loop.create_task(cut(gw, torn), context=contextvars.Context())
            with pytest.raises(NotFound):
                await loop.create_task(
                    cut(gw, NotFound("no such task")), context=contextvars.Context()
                )
        finally:
            await pool.close()
    assert refused.value.headers["Retry-After"]
