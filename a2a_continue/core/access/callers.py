"""Callers: bearer JWT to identity, and the scoping predicates."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import jwt
import msgspec
from starlette.types import Scope

from a2a_continue.errors import Unauthorized


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


# The caller of a request without a token on a route open to one (an agent's façade card):
# no permission, no team, and a `sub` no token can carry, so it sees public agents only.
ANONYMOUS = Caller(sub="")


def mint_token(
    secret: str,
    sub: str,
    permissions: Sequence[str] = ("*",),
    teams: Sequence[str] = (),
    is_admin: bool = False,
    ttl_s: float = 3600,
    *,
    issuer: str = "",
    audience: str = "",
) -> str:
    """Sign a token for ``sub`` valid for ``ttl_s`` seconds; with ``issuer`` and ``audience``
    (the gateway's ``A2AC_JWT_ISSUER`` / ``A2AC_JWT_AUDIENCE``) it carries ``iss`` and ``aud``."""
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
    if issuer:
        claims["iss"] = issuer
    if audience:
        claims["aud"] = audience
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


def has_authorization(scope: Scope) -> bool:
    """Tell whether the request carries an Authorization header (valid or not)."""
    return any(name == b"authorization" for name, _ in scope["headers"])


class TokenSource(Protocol):
    """What turns a bearer token into a caller (``tokens.TokenVerifier`` in the app)."""

    async def caller(self, token: str) -> Caller: ...


# The scoping predicates: $1 = caller sub, $2 = caller teams, $3 = caller is admin.
AGENT_VISIBLE = (
    "(a.owner = $1 OR a.visibility = 'public'"
    " OR (a.visibility = 'team' AND a.team_id = ANY($2::text[])) OR $3::boolean)"
)
TASK_VISIBLE = f"({AGENT_VISIBLE} AND (t.owner = $1 OR t.team_id = ANY($2::text[]) OR $3::boolean))"
# A context a caller named on a start (`a2a_contexts c`), held as a task is: owner, team, admin.
CONTEXT_VISIBLE = "(c.owner = $1 OR c.team_id = ANY($2::text[]) OR $3::boolean)"
