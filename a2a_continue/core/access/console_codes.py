"""The console's one-time sign-in codes (table ``a2a_console_codes``).

``a2a-continue console`` stores a code and prints a link holding it in the URL fragment;
the console page exchanges it, once, for a short-lived token. Only the code's SHA-256 is
stored, and taking a code deletes it in the same statement, so two pages (or two replicas)
can never both use one.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Annotated

import msgspec
from msgspec import Meta

from a2a_continue.core.access.callers import Caller, mint_token
from a2a_continue.core.shapes.wire import Base
from a2a_continue.runtime.db import Conn


class SignedIn(msgspec.Struct, kw_only=True, rename="camel"):
    """What the console gets for a code: its token and who it signs in."""

    token: str
    sub: str
    is_admin: bool
    expires_in: int  # seconds


def _digest(code: str) -> bytes:
    return hashlib.sha256(code.encode()).digest()


async def create_code(conn: Conn, sub: str, is_admin: bool, ttl_s: float) -> str:
    """Store a new code for ``sub`` valid ``ttl_s`` seconds (and drop expired ones)."""
    code = secrets.token_urlsafe(32)
    await conn.execute(
        """
        WITH gone AS (DELETE FROM a2a_console_codes WHERE expires_at < now())
        INSERT INTO a2a_console_codes (code_sha256, sub, is_admin, expires_at)
        VALUES ($1, $2, $3, now() + make_interval(secs => $4))
        """,
        _digest(code),
        sub,
        is_admin,
        ttl_s,
    )
    return code


async def take_code(conn: Conn, code: str) -> Caller | None:
    """Use a code up: the caller it signs in, or None when it is unknown, used or expired."""
    row = await conn.fetchrow(
        """
        DELETE FROM a2a_console_codes WHERE code_sha256 = $1
        RETURNING sub, is_admin, expires_at > now() AS fresh
        """,
        _digest(code),
    )
    if row is None or not row["fresh"]:
        return None
    return Caller(sub=row["sub"], permissions=frozenset({"*"}), is_admin=row["is_admin"])


def sign_in(
    caller: Caller, secret: str, ttl_s: float, *, issuer: str = "", audience: str = ""
) -> SignedIn:
    """Mint the console's token for the caller a code named (with the gateway's issuer and
    audience, when it checks them)."""
    token = mint_token(
        secret,
        caller.sub,
        sorted(caller.permissions),
        caller.teams,
        caller.is_admin,
        ttl_s,
        issuer=issuer,
        audience=audience,
    )
    return SignedIn(token=token, sub=caller.sub, is_admin=caller.is_admin, expires_in=int(ttl_s))


class SignInBody(Base):
    """The console's exchange: the code of a sign-in link."""

    code: Annotated[str, Meta(min_length=1, max_length=200)]
