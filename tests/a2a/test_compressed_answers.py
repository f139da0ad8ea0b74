"""Compressed answers (`Content-Encoding: gzip`) are bounded by their decoded size."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web

from a2a_continue.app import create_app
from a2a_continue.core.agents.cards import MAX_CARD_BYTES
from a2a_continue.http.tokens import JWKS_MAX_BYTES
from a2a_continue.settings import Settings
from tests.support.client import Client, register
from tests.support.database import TASKS_WITH_CLAIMS
from tests.support.fakes import Handler, StartFake
from tests.support.identity import Keys, idp, refused, whoami
from tests.support.servers import serve_aiohttp, serve_asgi

JSON = dict[str, Any]
CAP = 4096
BAD_ANSWER = "urn:a2a-continue:problem:agent-bad-answer"
# Compresses about a thousandfold: a few KB on the wire, a hundred times the cap decoded.
PADDING = "x" * (CAP * 100)


def gzipped(body: bytes, content_type: str = "application/json") -> web.Response:
    """An answer compressed on the wire; its Content-Length is the compressed size."""
    headers = {"Content-Encoding": "gzip", "Content-Type": content_type}
    return web.Response(body=gzip.compress(body), headers=headers)


def rpc(request: JSON, result: JSON) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request["id"], "result": result})


def task(state: str, padding: str = "") -> JSON:
    found: JSON = {"id": "T1", "contextId": "C1", "status": {"state": state}}
    if padding:
        found["artifacts"] = [{"artifactId": "big", "parts": [{"text": padding}]}]
    return found


def agent_padding_its(method: str, *, sse: bool = False) -> Handler:
    """A 1.0 agent that starts T1 input-required and pads its later answers to ``method``."""

    async def handler(request: JSON) -> Any:
        first = "taskId" not in request["params"].get("message", {"taskId": None})
        if first or request["method"] != method:
            return msgspec.json.decode(rpc(request, {"task": task("TASK_STATE_INPUT_REQUIRED")}))
        body = rpc(request, {"task": task("TASK_STATE_COMPLETED", PADDING)})
        if sse:
            return gzipped(b"data: " + body + b"\n\n", "text/event-stream")
        return gzipped(body)

    return handler


@pytest.fixture
async def capped(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    """A client of a gateway that reads agent answers of at most CAP bytes."""
    small = msgspec.structs.replace(settings, max_agent_response_bytes=CAP)
    async with serve_asgi(create_app(small)) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


async def rows(db: asyncpg.Connection) -> tuple[Any, ...]:
    tasks = [dict(r) for r in await db.fetch("SELECT * FROM a2a_tasks ORDER BY id")]
    events = [dict(r) for r in await db.fetch("SELECT * FROM a2a_task_events ORDER BY seq")]
    return tasks, events


async def task_row(db: asyncpg.Connection) -> tuple[Any, ...]:
    row = await db.fetchrow(
        f"SELECT state, artifacts, token AS claim_token, last_seq FROM {TASKS_WITH_CLAIMS}"
    )
    assert row is not None
    return tuple(row)


def bad_answer(r: Any) -> None:
    assert r.status == 502, r.raw
    problem = msgspec.json.decode(r.raw)
    assert (problem["type"], problem["status"]) == (BAD_ANSWER, 502)
    assert problem["detail"] == f"the agent's answer is larger than {CAP} bytes"


async def begin(client: Client, agent: str) -> None:
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw


async def test_a_compressed_answer_within_the_bound_is_read_decoded(
    capped: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    async def small(request: JSON) -> Any:
        return gzipped(rpc(request, {"task": task("TASK_STATE_INPUT_REQUIRED")}))

    agent = await register(capped, (await fake_agent(small)).url)
    r = await capped.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    assert r.json()["result"]["task"]["id"] == "T1"
    assert r.headers["A2A-Task-State"] == "input-required"


async def test_a_start_answered_past_the_bound_once_decoded_is_502_and_stores_nothing(
    capped: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    async def padded(request: JSON) -> Any:
        return gzipped(rpc(request, {"task": task("TASK_STATE_INPUT_REQUIRED", PADDING)}))

    agent = await register(capped, (await fake_agent(padded)).url)
    bad_answer(await capped.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"}))
    assert await rows(db) == ([], [])


async def test_a_follow_up_answered_past_the_bound_once_decoded_is_502_and_logged_failed(
    capped: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register(capped, (await fake_agent(agent_padding_its("SendMessage"))).url)
    await begin(capped, agent)
    state, artifacts, claim, seq = await task_row(db)
    bad_answer(await capped.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "x"}))
    assert await task_row(db) == (state, artifacts, claim, seq + 1)
    last = await db.fetchrow("SELECT type, data FROM a2a_task_events ORDER BY seq DESC LIMIT 1")
    assert last is not None
    assert (last["type"], last["data"]["reason"]) == ("task_continue_failed", "agent-bad-answer")


async def test_a_cancel_answered_past_the_bound_once_decoded_is_502_and_leaves_the_task(
    capped: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register(capped, (await fake_agent(agent_padding_its("CancelTask"))).url)
    await begin(capped, agent)
    before = await rows(db)
    bad_answer(await capped.call("POST", f"/v1/a2a/{agent}/tasks/T1/cancel"))
    assert await rows(db) == before


@pytest.mark.parametrize("sse", [True, False], ids=["event-stream", "json"])
async def test_a_streamed_follow_up_answered_past_the_bound_once_decoded_is_502(
    capped: Client, db: asyncpg.Connection, fake_agent: StartFake, sse: bool
) -> None:
    fake = await fake_agent(agent_padding_its("SendStreamingMessage", sse=sse))
    agent = await register(capped, fake.url, capabilities={"streaming": True})
    r = await capped.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    state, artifacts, claim, seq = await task_row(db)
    r = await capped.call(
        "POST",
        f"/v1/a2a/{agent}/tasks/T1/messages",
        {"text": "x"},
        headers={"Accept": "text/event-stream"},
    )
    assert r.status == 502, r.raw
    detail = r.json()["detail"]
    assert detail.endswith(f"is larger than {CAP} bytes")
    assert await task_row(db) == (state, artifacts, claim, seq + 1)
    last = await db.fetchval("SELECT type FROM a2a_task_events ORDER BY seq DESC LIMIT 1")
    assert last == "task_continue_failed"


async def test_a_card_past_the_bound_once_decoded_is_422(
    client: Client, db: asyncpg.Connection
) -> None:
    card = {"name": "w", "url": "http://127.0.0.1:9/", "description": "x" * MAX_CARD_BYTES}

    async def padded(request: web.Request) -> web.StreamResponse:
        return gzipped(msgspec.json.encode(card))

    app = web.Application()
    app.router.add_get("/card.json", padded)
    async with serve_aiohttp(app) as base:
        r = await client.call("POST", "/v1/a2a/agents", {"cardUrl": base + "/card.json"})
    assert r.status == 422, r.raw
    assert r.json()["errors"][0]["msg"].endswith(f"it is larger than {MAX_CARD_BYTES} bytes")
    assert await db.fetchval("SELECT count(*) FROM a2a_agents") == 0


async def test_a_key_set_past_the_bound_once_decoded_is_refused_like_an_unreachable_one(
    settings: Settings, db: asyncpg.Connection
) -> None:
    keys = Keys()
    keys.add_rsa("rsa-1")

    async def padded(request: web.Request) -> web.StreamResponse:
        body = {"keys": keys.published, "padding": "x" * JWKS_MAX_BYTES}
        return gzipped(msgspec.json.encode(body))

    app = web.Application()
    app.router.add_get("/jwks.json", padded)
    async with serve_aiohttp(app) as jwks:
        changed = msgspec.structs.replace(settings, **idp(jwks + "/jwks.json"))
        async with serve_asgi(create_app(changed)) as base, aiohttp.ClientSession() as session:
            r = await whoami(Client(base, session, bearer=None), keys.sign("rsa-1"))
    assert refused(r) == "the token cannot be verified: the key set cannot be had"
