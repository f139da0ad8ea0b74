"""The route table's vocabulary: one entry per route, from which the router, the permission
check and the API description all derive (``app.ROUTES`` puts the edges' entries together).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.core.access.callers import Caller
from a2a_continue.errors import Forbidden

JSON = dict[str, Any]
Handler = Callable[[Request], Awaitable[Response]]

# The permission of a route that answers without a token.
PUBLIC = "public"
# The permission of a route whose handler checks one per request (the A2A façade's
# JSON-RPC endpoint: a2a.invoke to send or cancel, a2a.read to read); the edge still
# requires a valid token.
PER_METHOD = "per-method"


@dataclass(frozen=True)
class Param:
    """A query parameter."""

    name: str
    description: str
    schema: JSON = field(default_factory=lambda: {"type": "string"})


@dataclass(frozen=True)
class Operation:
    """What the API description says of one route beyond its path, method and permission."""

    summary: str
    body: type | JSON | None = None  # a wire type, or the schema of raw JSON
    body_optional: bool = False
    status: int = 200
    answer: type | str | None = None  # a wire type, a description of raw JSON, or nothing
    task_answer: type | None = None  # the answer instead with ``answer=task`` (a wire type)
    query: tuple[Param, ...] = ()
    problems: tuple[int, ...] = ()
    task_state: bool = False
    sse: str | None = None  # what the route streams with ``Accept: text/event-stream``
    idempotent: bool = False  # takes an ``Idempotency-Key`` (SPEC §10)
    example: JSON | None = None  # a body the route accepts, for "Try it out"
    location: str | None = None  # what the answer's ``Location`` header names


# Compared and hashed by identity: a table (a tuple of entries) can key a cache.
@dataclass(frozen=True, eq=False)
class ApiRoute:
    """One route: method, path (Starlette form), handler, permission, API description.

    ``permission`` is a permission name the token must grant, ``PUBLIC`` or ``PER_METHOD``.
    """

    method: str
    path: str
    handler: Handler
    permission: str
    operation: Operation
    # Without a token the handler runs for ``callers.ANONYMOUS`` (who sees public agents
    # only) instead of the edge answering 401; with one, ``permission`` applies as usual.
    anonymous: bool = False


def check_permission(caller: Caller, permission: str | None, method: str, path: str) -> None:
    """Refuse with 403 unless the route is in the table (``permission`` is not None) and the
    caller holds its permission (a per-method route checks each method's permission itself)."""
    if permission is None:
        raise Forbidden(f"{method} {path} is not in the permission table")
    if permission != PER_METHOD and not caller.may(permission):
        raise Forbidden(f"this route needs the {permission!r} permission")
