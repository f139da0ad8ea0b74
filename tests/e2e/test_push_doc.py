"""docs/push.md as written: its config example gets signed deliveries, its receiver snippet
verifies them, and its loopback rule holds."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import jwt
import pytest

from a2a_continue.app import create_app
from a2a_continue.settings import Settings, parse_networks
from tests.support.client import Client, register
from tests.support.fakes import Scripted, StartFake, task_v10
from tests.support.push import fast_push, start_task
from tests.support.receiver import Receiver, push_receiver
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually

PUSH_DOC = Path(__file__).resolve().parents[2] / "docs" / "push.md"
ISSUER = "https://gateway.example.com"  # the doc's GATEWAY, as A2AC_PUBLIC_URL


def snippet() -> str:
    section = PUSH_DOC.read_text().split("### Verifying a delivery", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def config_example() -> dict[str, Any]:
    """The body of the doc's curl that creates a config."""
    section = PUSH_DOC.read_text().split("## Configs", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```sh\n(curl .*?)\n# →", section, re.S)
    assert match is not None
    words = shlex.split(match.group(1).replace("\\\n", " "))
    assert "push-configs" in next(w for w in words if w.startswith("$GW"))
    body: dict[str, Any] = json.loads(words[words.index("-d") + 1])
    return body


def networks_example() -> str:
    """The value the doc gives ``A2AC_PUSH_NETWORKS`` to forbid loopback webhooks."""
    match = re.search(r"^A2AC_PUSH_NETWORKS=(\S+)$", PUSH_DOC.read_text(), re.M)
    assert match is not None
    return match.group(1)


@pytest.fixture
async def push_client(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    app = create_app(fast_push(settings, public_url=ISSUER))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with push_receiver() as opened:
        yield opened


async def test_the_config_example_gets_deliveries_the_receiver_snippet_accepts(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    fake = await fake_agent(Scripted(start=lambda r: task_v10("T1", "input-required")))
    agent = await register(push_client, fake.url)
    await start_task(push_client, agent)
    body = {**config_example(), "url": receiver.url}
    assert body["authentication"] == {"scheme": "Bearer"}  # the signed JWT, no credentials
    made = await push_client.call("POST", f"/v1/a2a/{agent}/tasks/T1/push-configs", body)
    assert made.status == 201, made.raw
    r = await push_client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "Paris"})
    assert r.status == 200
    (got,) = await eventually(lambda: receiver.ok() or None, "a delivery")
    assert got.headers["Authorization"].startswith("Bearer ")
    assert got.headers["X-A2A-Notification-Token"] == config_example()["token"]
    namespace: dict[str, Any] = {}
    exec(compile(snippet(), str(PUSH_DOC), "exec"), namespace)  # our own docs
    namespace["MY_URL"] = receiver.url
    namespace["jwks"] = jwt.PyJWKClient(push_client.base + "/.well-known/jwks.json")
    accept = namespace["accept"]
    assert await asyncio.to_thread(accept, got.headers, got.raw)
    assert namespace["seen"] == {got.delivery_id}
    assert not await asyncio.to_thread(accept, got.headers, got.raw + b" ")


async def test_a_loopback_webhook_is_allowed_by_default_and_refused_under_the_docs_networks(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(Scripted(start=lambda r: task_v10("T1", "input-required")))
    body = config_example()
    assert body["url"].startswith("http://127.0.0.1:")
    networks = parse_networks(networks_example())
    for allowed in ((), networks):
        app = create_app(fast_push(settings, push_networks=allowed, push_dispatch=False))
        async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
            client = Client(base, session)
            agent = await register(client, fake.url)
            await start_task(client, agent)
            r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/push-configs", body)
        if not allowed:
            assert r.status == 201, r.raw
        else:
            assert r.status == 422, r.raw
            assert "A2AC_PUSH_NETWORKS" in r.json()["detail"]
            assert r.json()["errors"][0]["loc"] == "$.url"
