"""Shared fixtures: one real PostgreSQL per run, a gateway per test, tokens, fake agents."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web

from a2a_continue.a2a import netguard
from a2a_continue.app import create_app
from a2a_continue.core.schema import migrate_url
from a2a_continue.runtime.hub import EVENTS_CHANNEL
from a2a_continue.runtime.secrets import new_key
from a2a_continue.settings import Settings
from tests.support.client import JWT_SECRET, Client
from tests.support.database import (
    create_database,
    direct_url,
    drop_database,
    statement_cache,
    with_database,
)
from tests.support.fakes import FakeAgent, Handler, Script, SseAgent
from tests.support.ports import free_port
from tests.support.processes import CLAIM_MARGIN_S, GatewayProcess, gateway_env, serve_process
from tests.support.sdk_agent import SdkAgent, run_sdk_agent
from tests.support.servers import serve_aiohttp, serve_asgi
from tests.support.sockets import Sockets


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """The PostgreSQL server of the run: A2AC_DATABASE_URL, or an embedded one."""
    given = os.environ.get("A2AC_DATABASE_URL")
    if given:
        yield given
        return
    from a2a_continue.ops.embedded import embedded_database

    with (
        tempfile.TemporaryDirectory(prefix="a2ac-test-") as tmp,
        embedded_database(Path(tmp)) as url,
    ):
        yield url


@pytest.fixture(scope="session")
def database_url(server_url: str) -> Iterator[str]:
    """A fresh database for this run on that server, migrated."""
    name = f"a2ac_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(create_database(server_url, name))
    url = with_database(server_url, name)
    asyncio.run(migrate_url(url, statement_cache()))
    try:
        yield url
    finally:
        asyncio.run(drop_database(server_url, name))


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A direct connection to the test database, emptied before the test."""
    conn = await asyncpg.connect(direct_url(database_url))
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name,
            encoder=lambda v: msgspec.json.encode(v).decode(),
            decoder=msgspec.json.decode,
            schema="pg_catalog",
        )
    await conn.execute(
        "TRUNCATE a2a_agents, a2a_tasks, a2a_task_events, a2a_claims, a2a_push_deliveries CASCADE"
    )
    await conn.execute("TRUNCATE a2a_idempotency_keys")
    await conn.execute("TRUNCATE a2a_limit_overrides, a2a_limit_buckets, a2a_limit_slots")
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture(autouse=True)
def sockets(monkeypatch: pytest.MonkeyPatch) -> Sockets:
    """Every socket the gateway's outbound connectors open, recorded; none but to loopback,
    even were the address guard wrong."""
    recorder = Sockets()
    monkeypatch.setattr(netguard, "open_socket", recorder)
    return recorder


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings of a test gateway (short agent timeout)."""
    return Settings(
        database_url=database_url,
        jwt_secret=JWT_SECRET,
        encryption_key=new_key(),
        agent_timeout_s=5.0,
        claim_margin_s=1.0,
        max_body_bytes=64 * 1024,
        pool_size=5,
        db_statement_cache=statement_cache(),
        listen_database_url=(
            direct_url(database_url) if os.environ.get("A2AC_LISTEN_DATABASE_URL") else None
        ),
    )


@pytest.fixture
async def gateway_url(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[str]:
    """A running gateway over the test database."""
    async with serve_asgi(create_app(settings)) as base:
        yield base


@pytest.fixture
async def client(gateway_url: str) -> AsyncIterator[Client]:
    """A client of the test gateway, calling as alice with every permission."""
    async with aiohttp.ClientSession() as session:
        yield Client(gateway_url, session)


@pytest.fixture
async def fake_agent() -> AsyncIterator[Callable[[Handler], Awaitable[FakeAgent]]]:
    """Start fake agents: each takes a handler from request body to answer (dict, bytes or
    web.Response)."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(handler: Handler) -> FakeAgent:
            agent = FakeAgent()

            async def endpoint(request: web.Request) -> web.StreamResponse:
                body = msgspec.json.decode(await request.read())
                agent.received.append(body)
                agent.headers.append(dict(request.headers))
                answer = await handler(body)
                if isinstance(answer, web.StreamResponse):
                    return answer
                if isinstance(answer, bytes):
                    return web.Response(body=answer, content_type="application/json")
                return web.json_response(answer)

            app = web.Application()
            app.router.add_post("/", endpoint)
            base = await stack.enter_async_context(serve_aiohttp(app))
            agent.url = base + "/"
            return agent

        yield start


@pytest.fixture
async def notifications(database_url: str) -> AsyncIterator[asyncio.Queue[str]]:
    """What a connection LISTENing on the events channel receives."""
    conn = await asyncpg.connect(direct_url(database_url))
    queue: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener(EVENTS_CHANNEL, lambda _c, _p, _ch, payload: queue.put_nowait(payload))
    try:
        yield queue
    finally:
        await conn.close()


@pytest.fixture
async def sdk() -> AsyncIterator[SdkAgent]:
    """A real a2a-sdk agent (1.0 and 0.3 on one endpoint)."""
    async with run_sdk_agent() as agent:
        yield agent


@pytest.fixture
async def sse_agent() -> AsyncIterator[Callable[[Script], Awaitable[SseAgent]]]:
    """Start agents that answer every request with an event stream a script writes."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(script: Script) -> SseAgent:
            agent = SseAgent()

            async def endpoint(request: web.Request) -> web.StreamResponse:
                body = await request.json()
                agent.received.append(body)
                response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await response.prepare(request)

                async def send(data: bytes) -> None:
                    agent.sent.append(data)
                    await response.write(b"data: " + data + b"\n\n")

                with contextlib.suppress(ConnectionError):
                    await script(body, send)
                return response

            app = web.Application()
            app.router.add_post("/", endpoint)
            agent.url = await stack.enter_async_context(serve_aiohttp(app)) + "/"
            return agent

        yield start


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client session for the test."""
    async with aiohttp.ClientSession() as opened:
        yield opened


@pytest.fixture
async def spawn_gateway(
    database_url: str, settings: Settings, db: asyncpg.Connection, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[GatewayProcess]]]:
    """Start ``a2a-continue serve`` processes on the test database, each with the given
    environment overrides; every one is killed at the end."""
    env = gateway_env(
        database_url, settings.encryption_key, A2AC_CLAIM_MARGIN_S=str(CLAIM_MARGIN_S)
    )
    async with contextlib.AsyncExitStack() as stack:

        async def spawn(**overrides: str) -> GatewayProcess:
            port = free_port()
            log = tmp_path / f"gateway-{port}.log"
            return await stack.enter_async_context(serve_process({**env, **overrides}, log, port))

        yield spawn
