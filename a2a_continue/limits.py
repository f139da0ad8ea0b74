"""Limits on text and JSON shape: what PostgreSQL cannot store, and nesting depth."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from a2a_continue.errors import AppError, Invalid

# Deeper JSON is refused before it is decoded (decoders recurse; so does our own code).
MAX_JSON_DEPTH = 64
# The longest task or context id the store keeps (a CHECK in the schema says the same).
MAX_ID_CHARS = 500
# PostgreSQL text and jsonb cannot hold U+0000; a stored copy carries U+FFFD instead.
NUL = "\x00"
NUL_STAND_IN = "\ufffd"

# A whole string, a bracket, or a quote that opens no complete string (the JSON is broken).
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]|"', re.DOTALL)


class TooDeep(ValueError):
    """JSON nested deeper than MAX_JSON_DEPTH."""


def json_depth(raw: bytes, stop_above: int = 1 << 30) -> int:
    """Return how deeply a JSON text's arrays and objects nest, up to ``stop_above`` + 1."""
    depth = deepest = 0
    for token in _TOKEN.finditer(raw):
        mark = token.group()
        if mark in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > stop_above:
                break
        elif mark in (b"]", b"}"):
            depth -= 1
        elif mark == b'"':
            break  # an unterminated string: the decoder refuses the text anyway
    return deepest


def check_depth(raw: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise TooDeep when ``raw`` nests deeper than ``limit``."""
    if raw.count(b"[") + raw.count(b"{") > limit and json_depth(raw, limit) > limit:
        raise TooDeep(f"the JSON nests deeper than {limit} levels")


def nul_path(value: Any, path: str = "$") -> str | None:
    """Return where a string (or object key) holding U+0000 is in ``value``, or None."""
    if isinstance(value, str):
        return path if NUL in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and NUL in key:
                return f"{path}.{key.replace(NUL, '?')}"
            found = nul_path(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = nul_path(item, f"{path}[{index}]")
            if found:
                return found
    return None


def body_nul_path(raw: bytes) -> str | None:
    """Return where a JSON body holds U+0000, or None (cheap when it holds no escape)."""
    if b"\\u0000" not in raw:
        return None
    try:
        return nul_path(msgspec.json.decode(raw))
    except msgspec.DecodeError:
        return None


def has_nul(*values: str | None) -> bool:
    """Tell whether any of the strings holds U+0000."""
    return any(value is not None and NUL in value for value in values)


def scrub(value: Any) -> Any:
    """Return ``value`` with U+0000 replaced by U+FFFD in every string and key."""
    if isinstance(value, str):
        return value.replace(NUL, NUL_STAND_IN)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(item) for item in value]
    return value


def encode_storable_json(value: object) -> str:
    """Encode a jsonb value; strings holding U+0000 are stored with U+FFFD instead."""
    text = msgspec.json.encode(value)
    if b"\\u0000" in text:
        text = msgspec.json.encode(scrub(value))
    return text.decode()


# Header names an agent's credentials may use: RFC 9110 tokens, minus the ones that frame
# the request (the gateway sets those itself).
_TOKEN_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FRAMING = frozenset(
    {"content-length", "transfer-encoding", "connection", "host", "keep-alive", "upgrade", "te"}
)
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def header_problem(name: str, value: str) -> str | None:
    """Say why a credential header could not be sent as given, or None when it can."""
    if not _TOKEN_NAME.fullmatch(name):
        return "a header name must be a token (letters, digits and !#$%&'*+-.^_`|~)"
    if name.lower() in _FRAMING:
        return f"the gateway sets {name!r} itself"
    if _CONTROL.search(value):
        return "a header value must not contain CR, LF, NUL or other control characters"
    return None


def check_agent_auth(auth: object) -> None:
    """Refuse credentials that would make a header aiohttp refuses to send (422)."""
    if auth is None:
        return
    raw = msgspec.to_builtins(auth)
    if raw.get("type") == "bearer":
        headers = {"Authorization": f"Bearer {raw['token']}"}
        locs = {"Authorization": "$.auth.token"}
    elif raw.get("type") == "headers":
        headers = raw["headers"]
        locs = {name: f"$.auth.headers.{name}" for name in headers}
    else:
        return
    errors = [
        {"loc": locs[name], "msg": problem}
        for name, value in headers.items()
        if (problem := header_problem(name, value))
    ]
    if errors:
        raise Invalid(errors)


class BodyTimeout(AppError):
    status, slug, title = 408, "body-timeout", "The request body did not arrive in time"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        # The rest of the body may still come; the connection cannot carry another request.
        self.headers["Connection"] = "close"


def body_timeout(seconds: float) -> BodyTimeout:
    """The 408 of a request body that did not fully arrive within ``seconds``."""
    return BodyTimeout(f"the request body did not fully arrive within {seconds:g} s")
