"""Query parameters of the listing routes: limits, keyset cursors, ``after``."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import uuid
from collections.abc import Mapping

import msgspec

from a2a_continue.errors import InvalidQuery

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def _bad(name: str, msg: str) -> InvalidQuery:
    return InvalidQuery(name, msg)


def int_param(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """Read an integer query parameter within [low, high]."""
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _bad(name, f"must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise _bad(name, f"must be between {low} and {high}, got {value}")
    return value


def limit_param(params: Mapping[str, str]) -> int:
    """Read ``limit`` (1..200, default 50)."""
    return int_param(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)


def encode_cursor(created_at: dt.datetime, row_id: uuid.UUID) -> str:
    """Encode the position after one row of a newest-first listing."""
    raw = msgspec.json.encode([created_at.isoformat(), str(row_id)])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_param(params: Mapping[str, str]) -> tuple[dt.datetime | None, uuid.UUID | None]:
    """Decode ``cursor`` into (created_at, id), or (None, None) for the first page."""
    raw = params.get("cursor")
    if not raw:
        return None, None
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        stamp, row_id = msgspec.json.decode(text, type=tuple[str, str])
        at = dt.datetime.fromisoformat(stamp)
        # Only an aware time the database can hold: shifting it to UTC must not overflow.
        if at.tzinfo is None:
            raise ValueError("a cursor's time carries its offset")
        return at.astimezone(dt.UTC), uuid.UUID(row_id)
    except (binascii.Error, ValueError, OverflowError, msgspec.DecodeError):
        raise _bad("cursor", "is not a cursor this service issued") from None
