"""Request paths as sent: percent-encoded task ids, and path or query text the store refuses."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import Scope

from a2a_continue.errors import Invalid, InvalidQuery
from a2a_continue.limits import NUL


class TaskIdConvertor(Convertor[str]):
    """A task id: one path segment, percent-decoded (so it may hold '/', '%', spaces, …)."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("task_id", TaskIdConvertor())

# Everything but '/' and '%' stays as decoded: only those two would change the routing.
_SAFE = "".join(chr(c) for c in range(32, 127) if chr(c) not in "/%")


def routing_path(raw_path: bytes) -> str:
    """Decode each segment of the raw path, keeping '/' and '%' inside a segment encoded."""
    segments = raw_path.decode("latin-1").split("/")
    return "/".join(quote(unquote(s), safe=_SAFE) for s in segments)


def refused_text(scope: Scope) -> Invalid | None:
    """Refuse a path or query value holding U+0000, which PostgreSQL text cannot store."""
    if NUL in scope["path"]:
        return Invalid([{"loc": "$.path", "msg": "must not contain U+0000"}])
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if NUL in name or NUL in value:
            return InvalidQuery(name.replace(NUL, "?"), "must not contain U+0000")
    return None
