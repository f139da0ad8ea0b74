"""Callers: bearer JWT to identity, the route-permission table, and the scoping predicates."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import jwt
import msgspec
from starlette.types import Scope

from a2a_continue.errors import Forbidden, Unauthorized

# Every shipped route and the permission it needs. A route missing here is denied.
PERMISSIONS: dict[tuple[str, str], str] = {
    ("GET", "/v1/a2a/agents"): "a2a.read",
    ("POST", "/v1/a2a/agents"): "a2a.create",
    ("GET", "/v1/a2a/agents/{agent_id:uuid}"): "a2a.read",
    ("PATCH", "/v1/a2a/agents/{agent_id:uuid}"): "a2a.update",
    ("DELETE", "/v1/a2a/agents/{agent_id:uuid}"): "a2a.delete",
    ("POST", "/v1/a2a/{agent_id:uuid}/messages"): "a2a.invoke",
    ("GET", "/v1/a2a/{agent_id:uuid}/tasks"): "a2a.read",
    ("GET", "/v1/a2a/{agent_id:uuid}/tasks/{task_id:task_id}"): "a2a.read",
    ("GET", "/v1/a2a/{agent_id:uuid}/tasks/{task_id:task_id}/events"): "a2a.read",
    ("POST", "/v1/a2a/{agent_id:uuid}/tasks/{task_id:task_id}/messages"): "a2a.invoke",
    ("POST", "/v1/a2a/{agent_id:uuid}/tasks/{task_id:task_id}/cancel"): "a2a.invoke",
    ("GET", "/a2a/{agent_id:uuid}/.well-known/agent-card.json"): "a2a.read",
    ("POST", "/a2a/{agent_id:uuid}"): "per-method",
    ("GET", "/metrics"): "a2a.metrics",
}

# The permission of a route whose handler checks one per request (the A2A façade's
# JSON-RPC endpoint: a2a.invoke to send or cancel, a2a.read to read); the middleware
# still requires a valid token.
PER_METHOD = "per-method"

# Routes that answer without a token.
PUBLIC: frozenset[tuple[str, str]] = frozenset(
    {
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/docs/"),
        ("GET", "/docs/{asset}"),
    }
)


class Caller(msgspec.Struct, frozen=True, kw_only=True):
    """Who is calling, as the token says."""

    sub: str
    permissions: frozenset[str] = frozenset()
    teams: tuple[str, ...] = ()
    is_admin: bool = False
    expires_at: float = math.inf

    def may(self, permission: str) -> bool:
        """Tell whether the token grants ``permission``."""
        return "*" in self.permissions or permission in self.permissions

    def scope_args(self) -> tuple[str, list[str], bool]:
        """Return the values bound to $1, $2, $3 of every scoped query."""
        return self.sub, list(self.teams), self.is_admin


def mint_token(
    secret: str,
    sub: str,
    permissions: Sequence[str] = ("*",),
    teams: Sequence[str] = (),
    is_admin: bool = False,
    ttl_s: float = 3600,
) -> str:
    """Sign a token for ``sub`` valid for ``ttl_s`` seconds."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": sub,
        "permissions": list(permissions),
        "teams": list(teams),
        "is_admin": is_admin,
        "iat": now,
        "exp": now + int(ttl_s),
        "jti": uuid.uuid4().hex,
    }
    return str(jwt.encode(claims, secret, algorithm="HS256"))


def bearer_token(scope: Scope) -> str:
    """Return the bearer token of the request; raise Unauthorized when there is none."""
    values = [value for name, value in scope["headers"] if name == b"authorization"]
    if len(values) > 1:
        raise Unauthorized("send one Authorization header, not several")
    if not values:
        raise Unauthorized("an Authorization: Bearer token is required")
    header: str = values[0].decode("latin-1")
    kind, _, token = header.partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    return token.strip()


def check_permission(caller: Caller, method: str, path: str) -> None:
    """Refuse with 403 unless the route is in the table and the caller holds its permission
    (a per-method route checks each method's permission itself)."""
    permission = PERMISSIONS.get((method, path))
    if permission is None:
        raise Forbidden(f"{method} {path} is not in the permission table")
    if permission != PER_METHOD and not caller.may(permission):
        raise Forbidden(f"this route needs the {permission!r} permission")


class TokenSource(Protocol):
    """What turns a bearer token into a caller (``tokens.TokenVerifier`` in the app)."""

    async def caller(self, token: str) -> Caller: ...


# The scoping predicates: $1 = caller sub, $2 = caller teams, $3 = caller is admin.
AGENT_VISIBLE = (
    "(a.owner = $1 OR a.visibility = 'public'"
    " OR (a.visibility = 'team' AND a.team_id = ANY($2::text[])) OR $3::boolean)"
)
TASK_VISIBLE = f"({AGENT_VISIBLE} AND (t.owner = $1 OR t.team_id = ANY($2::text[]) OR $3::boolean))"
