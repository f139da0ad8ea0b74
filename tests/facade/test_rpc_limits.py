"""The A2A façade under the hardening rules: U+0000 and deep nesting are JSON-RPC errors,
and nothing is sent or written."""

from __future__ import annotations

import asyncpg
import pytest

from tests.support.client import Client, register
from tests.support.database import counts
from tests.support.facade_clients import rpc
from tests.support.fakes import Scripted, StartFake
from tests.support.rpc import message_v10


@pytest.mark.parametrize(
    "params",
    [
        {"id": "T\x001"},
        {"message": {**message_v10("hi"), "contextId": "C\x00"}},
        {"message": message_v10("hi\x00")},
        {"message": message_v10("hi"), "metadata": {"k\x00": 1}},
    ],
)
async def test_facade_params_holding_nul_are_invalid_params_and_reach_no_agent(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake, params: dict[str, object]
) -> None:
    fake = await fake_agent(Scripted())
    agent = await register(client, fake.url)
    before = await counts(db)
    method = "GetTask" if "id" in params else "SendMessage"
    r = await rpc(client, agent, method, params, version="1.0", rpc_id=9)
    assert (r.status, r.json()["id"], r.json()["error"]["code"]) == (200, 9, -32602)
    assert "U+0000" in r.json()["error"]["message"]
    assert await counts(db) == before
    assert fake.received == []


async def test_facade_body_nested_too_deep_is_an_invalid_request(
    client: Client, db: asyncpg.Connection
) -> None:
    agent = await register(client, "http://127.0.0.1:9/")
    deep = b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"x": '
    body = deep + b"[" * 5000 + b"]" * 5000 + b"}}"
    headers = {"Content-Type": "application/json"}
    r = await client.call("POST", f"/a2a/{agent}", data=body, headers=headers)
    assert (r.status, r.json()["error"]["code"]) == (200, -32600)
    assert "deeper" in r.json()["error"]["message"]
