"""Query parameters of the listing routes: limits, keyset cursors, ``after``."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import uuid
from collections.abc import Mapping

import msgspec

from a2a_continue.errors import InvalidQuery
from a2a_continue.limits import NUL

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


def cursor_bytes(params: Mapping[str, str]) -> bytes | None:
    """The decoded bytes of ``cursor`` (None: none given), refused as any query value is.

    A cursor's reader must also check that it encodes back to itself: the decoders alone are
    lenient (any character separates an ISO date and time, a UUID may come braced or
    prefixed, ``int`` takes spaces and other scripts' digits).
    """
    raw = params.get("cursor")
    if not raw:
        return None
    if NUL in raw:
        raise _bad("cursor", "must not contain U+0000")
    try:
        # validate: the plain decoder skips whatever is not of the alphabet.
        return base64.b64decode(raw + "=" * (-len(raw) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise not_issued() from None


def issued(params: Mapping[str, str], encoded: str) -> None:
    """Refuse a cursor that is not ``encoded``, the one this service writes for its position."""
    if params["cursor"].rstrip("=") != encoded:
        raise not_issued()


def not_issued() -> InvalidQuery:
    """The refusal of a cursor no page of this service handed out."""
    return _bad("cursor", "is not a cursor this service issued")


def cursor_param(params: Mapping[str, str]) -> tuple[dt.datetime | None, uuid.UUID | None]:
    """Decode ``cursor`` into (created_at, id), or (None, None) for the first page."""
    text = cursor_bytes(params)
    if text is None:
        return None, None
    try:
        stamp, row_id = msgspec.json.decode(text, type=tuple[str, str])
        at = dt.datetime.fromisoformat(stamp)
        # Only an aware time the database can hold: shifting it to UTC must not overflow.
        if at.tzinfo is None:
            raise ValueError("a cursor's time carries its offset")
        at, after = at.astimezone(dt.UTC), uuid.UUID(row_id)
    except (ValueError, OverflowError, msgspec.DecodeError):
        raise not_issued() from None
    issued(params, encode_cursor(at, after))
    return at, after
