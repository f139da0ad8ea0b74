"""Cursors: one this service did not write is 422 (never 500), validated like any query value."""

from __future__ import annotations

import base64
import uuid

import msgspec
import pytest

from a2a_continue.core.shapes.pagination import cursor_param
from a2a_continue.errors import InvalidQuery
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
    # Lenient decoders: U+0000 as the date-time separator, a UUID braced or as a URN, bytes
    # outside base64url's alphabet (which the plain decoder skips).
    "nul-in-the-time": cursor("2024-01-01\u000012:00:00+00:00", str(uuid.uuid4())),
    "braced-uuid": cursor("2024-01-01T12:00:00+00:00", f"{{{uuid.uuid4()}}}"),
    "urn-uuid": cursor("2024-01-01T12:00:00+00:00", uuid.uuid4().urn),
    "other-offset": cursor("2024-01-01T14:00:00+02:00", str(uuid.uuid4())),
    "outside-the-alphabet": "!" + cursor("2024-01-01T12:00:00+00:00", str(uuid.uuid4())),
}


@pytest.mark.parametrize("name", sorted(BAD_CURSORS))
async def test_a_cursor_this_service_did_not_write_is_422_on_both_listings(
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


def test_a_cursor_holding_u0000_is_refused_as_any_query_value_is() -> None:
    issued = cursor("2024-01-01T12:00:00+00:00", str(uuid.uuid4()))
    with pytest.raises(InvalidQuery) as refused:
        cursor_param({"cursor": issued[:4] + "\x00" + issued[4:]})
    assert refused.value.extra["errors"] == [
        {"loc": "$.query.cursor", "msg": "must not contain U+0000"}
    ]


def test_a_cursor_as_this_service_writes_it_is_taken_with_or_without_padding() -> None:
    row = uuid.uuid4()
    issued = cursor("2024-01-01T12:00:00.250000+00:00", str(row))
    for given in (issued, issued + "=" * (-len(issued) % 4)):
        at, after = cursor_param({"cursor": given})
        assert (at.isoformat(), after) == ("2024-01-01T12:00:00.250000+00:00", row)
