"""The wire's common shapes: the base of every body accepted or returned, and decoding one."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from a2a_continue.errors import Invalid
from a2a_continue.limits import MAX_JSON_DEPTH, TooDeep, body_nul_path, check_depth


class Base(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Every body the gateway accepts: camelCase, unknown fields refused."""

    @classmethod
    def explain(cls, loc: str, msg: str) -> str:
        """The 422's message for a body of this kind that is wrong at ``loc``."""
        return msg


class Out(msgspec.Struct, kw_only=True, rename="camel"):
    """Every body the gateway returns: camelCase."""


T = TypeVar("T")

_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def decode_body(raw: bytes, kind: type[T]) -> T:
    """Decode ``raw`` as ``kind``; refuse it with a 422 that says where it is wrong."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    if not raw.strip():
        raise Invalid([{"loc": "$", "msg": "the request body is empty; expected a JSON object"}])
    check_storable_body(raw)
    try:
        value: T = decoder.decode(raw)
    except msgspec.ValidationError as exc:
        message, _, loc = str(exc).partition(" - at `")
        where = loc.rstrip("`") or "$"
        if issubclass(kind, Base):
            message = kind.explain(where, message)
        raise Invalid([{"loc": where, "msg": message}]) from None
    except msgspec.DecodeError as exc:
        raise Invalid([{"loc": "$", "msg": f"the body is not valid JSON ({exc})"}]) from None
    return value


def check_storable_body(raw: bytes) -> None:
    """Refuse a body nested deeper than the limit or holding U+0000 anywhere (422)."""
    try:
        check_depth(raw)
    except TooDeep:
        msg = f"the body nests deeper than {MAX_JSON_DEPTH} levels"
        raise Invalid([{"loc": "$", "msg": msg}]) from None
    where = body_nul_path(raw)
    if where is not None:
        raise Invalid([{"loc": where, "msg": "must not contain U+0000"}])


def encode(value: object) -> bytes:
    """Encode a response body."""
    return msgspec.json.encode(value)
