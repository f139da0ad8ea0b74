"""Shared fixtures: one real PostgreSQL per run, a gateway per test, tokens, fake agents."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web
from multidict import CIMultiDict

from a2a_continue.app import create_app
from a2a_continue.core.callers import mint_token
from a2a_continue.runtime.db import migrate_url
from a2a_continue.runtime.hub import EVENTS_CHANNEL
from a2a_continue.runtime.secrets import new_key
from a2a_continue.settings import Settings
from tests.support.sdk_agent import SdkAgent, run_sdk_agent
from tests.support.servers import serve_aiohttp, serve_asgi

JWT_SECRET = "test-secret-" + "x" * 32

# The members of a task as the gateway returns it (SPEC §6).
TASK_FIELDS = {
    "agentId",
    "id",
    "contextId",
    "state",
    "statusMessage",
    "artifacts",
    "owner",
    "teamId",
    "createdAt",
    "updatedAt",
    "completedAt",
    "lastSeq",
}


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def with_application_name(url: str, name: str) -> str:
    """``url`` whose connections show as ``name`` in pg_stat_activity (the URL may already
    carry a query, e.g. the embedded server's socket directory)."""
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


async def _create_database(url: str, name: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _drop_database(url: str, name: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


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
    asyncio.run(_create_database(server_url, name))
    url = _with_database(server_url, name)
    asyncio.run(migrate_url(url))
    try:
        yield url
    finally:
        asyncio.run(_drop_database(server_url, name))


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A direct connection to the test database, emptied before the test."""
    conn = await asyncpg.connect(database_url)
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name,
            encoder=lambda v: msgspec.json.encode(v).decode(),
            decoder=msgspec.json.decode,
            schema="pg_catalog",
        )
    await conn.execute("TRUNCATE a2a_agents, a2a_tasks, a2a_task_events CASCADE")
    await conn.execute("TRUNCATE a2a_idempotency_keys")
    try:
        yield conn
    finally:
        await conn.close()


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
    )


def token(
    sub: str = "alice@example.com",
    perms: list[str] | None = None,
    teams: list[str] | None = None,
    admin: bool = False,
) -> str:
    """Mint a test token."""
    return mint_token(JWT_SECRET, sub, perms or ["*"], teams or [], admin)


@dataclass
class Response:
    status: int
    headers: CIMultiDict[str]
    raw: bytes

    def json(self) -> Any:
        return msgspec.json.decode(self.raw)


@dataclass
class Client:
    """Calls the gateway over HTTP as one caller (a default token, overridable per call)."""

    base: str
    session: aiohttp.ClientSession
    bearer: str | None = field(default_factory=token)

    async def call(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        data: Any = None,
        bearer: str | None = "",
        headers: dict[str, str] | None = None,
    ) -> Response:
        hdrs = dict(headers or {})
        use = self.bearer if bearer == "" else bearer
        if use is not None:
            hdrs["Authorization"] = f"Bearer {use}"
        if json is not None:
            data = msgspec.json.encode(json)
            hdrs.setdefault("Content-Type", "application/json")
        async with self.session.request(method, self.base + path, data=data, headers=hdrs) as r:
            return Response(r.status, CIMultiDict(r.headers), await r.read())

    def as_(self, bearer: str) -> Client:
        return Client(self.base, self.session, bearer)


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


Handler = Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass
class FakeAgent:
    """A small aiohttp JSON-RPC agent whose answers the test scripts."""

    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


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
    conn = await asyncpg.connect(database_url)
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


async def register(client: Client, url: str, version: str = "1.0", **extra: Any) -> str:
    """Register an agent through the gateway; return its id."""
    body = {"name": "weather", "endpointUrl": url, "protocolVersion": version, **extra}
    r = await client.call("POST", "/v1/a2a/agents", body)
    assert r.status == 201, r.raw
    return str(r.json()["id"])


def dead_url() -> str:
    """A local URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


# What a streaming fake agent does with a request: write frames through the send function.
Script = Callable[[dict[str, Any], Callable[[bytes], Awaitable[None]]], Awaitable[None]]


@dataclass
class SseAgent:
    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)


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
