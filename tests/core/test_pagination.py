"""Cursors whose decoded values the database cannot hold are 422, never 500."""

from __future__ import annotations

import base64
import uuid

import msgspec
import pytest

from tests.support.client import Client, register


def cursor(stamp: str, row_id: str) -> str:
    raw = msgspec.json.encode([stamp, row_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


BAD_CURSORS = {
    "underflows-utc": cursor("0001-01-01T00:00:00+14:00", str(uuid.uuid4())),
    "overflows-utc": cursor("9999-12-31T23:59:59-14:00", str(uuid.uuid4())),
    "no-offset": cursor("2024-01-01T00:00:00", str(uuid.uuid4())),
    "year-zero": cursor("0000-01-01T00:00:00+00:00", str(uuid.uuid4())),
    "not-a-uuid": cursor("2024-01-01T00:00:00+00:00", "1" * 40),
    "huge-number": base64.urlsafe_b64encode(b"[1e400, 1]").decode(),
}


@pytest.mark.parametrize("name", sorted(BAD_CURSORS))
async def test_cursor_the_database_cannot_hold_is_422_on_both_listings(
    client: Client, name: str
) -> None:
    agent = await register(client, "http://127.0.0.1:9/")
    for path in ["/v1/a2a/agents", f"/v1/a2a/{agent}/tasks"]:
        r = await client.call("GET", f"{path}?cursor={BAD_CURSORS[name]}")
        assert r.status == 422, r.raw
        assert r.headers["Content-Type"].startswith("application/problem+json")
        assert r.json()["errors"][0]["loc"] == "$.query.cursor"


@pytest.mark.parametrize("param", ["limit", "after"])
async def test_integers_past_any_column_are_422(client: Client, param: str) -> None:
    agent = await register(client, "http://127.0.0.1:9/")
    path = f"/v1/a2a/{agent}/tasks/T1/events" if param == "after" else "/v1/a2a/agents"
    r = await client.call("GET", f"{path}?{param}={2**70}")
    assert r.status == 422, r.raw
    assert r.headers["Content-Type"].startswith("application/problem+json")
