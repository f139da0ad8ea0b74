"""The receiver snippet of docs/push.md verifies a real delivery of the gateway."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import jwt
import pytest

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.client import Client, register
from tests.support.fakes import Scripted, StartFake, task_v10
from tests.support.push import add_config, fast_push, start_task
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


@pytest.fixture
async def push_client(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    app = create_app(fast_push(settings, public_url=ISSUER))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with push_receiver() as opened:
        yield opened


async def test_the_push_doc_snippet_accepts_a_delivery_and_refuses_a_changed_body(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    fake = await fake_agent(Scripted(start=lambda r: task_v10("T1", "input-required")))
    agent = await register(push_client, fake.url)
    await start_task(push_client, agent)
    await add_config(push_client, agent, "T1", url=receiver.url,
                     authentication={"scheme": "Bearer"})  # fmt: skip
    r = await push_client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "Paris"})
    assert r.status == 200
    (got,) = await eventually(lambda: receiver.ok() or None, "a delivery")
    namespace: dict[str, Any] = {}
    exec(compile(snippet(), str(PUSH_DOC), "exec"), namespace)  # our own docs
    namespace["MY_URL"] = receiver.url
    namespace["jwks"] = jwt.PyJWKClient(push_client.base + "/.well-known/jwks.json")
    accept = namespace["accept"]
    assert await asyncio.to_thread(accept, got.headers, got.raw)
    assert namespace["seen"] == {got.delivery_id}
    assert not await asyncio.to_thread(accept, got.headers, got.raw + b" ")
