"""The console's one-time sign-in codes: stored hashed, used once, only before they expire."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import asyncpg
import jwt
import pytest

from a2a_continue.core.access.console_codes import create_code, sign_in, take_code
from tests.support.client import JWT_SECRET


@pytest.fixture
async def db(db: asyncpg.Connection) -> AsyncIterator[asyncpg.Connection]:
    """The test database with no sign-in code left by another test."""
    await db.execute("TRUNCATE a2a_console_codes")
    yield db


async def test_a_code_signs_in_its_caller_once(db: asyncpg.Connection) -> None:
    code = await create_code(db, "admin@localhost", True, 60)
    caller = await take_code(db, code)
    assert caller is not None
    assert (caller.sub, caller.is_admin, caller.may("a2a.invoke")) == (
        "admin@localhost",
        True,
        True,
    )
    assert await take_code(db, code) is None


async def test_only_the_codes_hash_is_stored(db: asyncpg.Connection) -> None:
    code = await create_code(db, "admin@localhost", True, 60)
    stored = await db.fetchval("SELECT code_sha256 FROM a2a_console_codes")
    assert stored == hashlib.sha256(code.encode()).digest()
    assert code.encode() not in stored


async def test_an_expired_code_signs_in_nobody_and_is_gone(db: asyncpg.Connection) -> None:
    code = await create_code(db, "admin@localhost", True, 60)
    await db.execute("UPDATE a2a_console_codes SET expires_at = now() - interval '1 second'")
    assert await take_code(db, code) is None
    assert await db.fetchval("SELECT count(*) FROM a2a_console_codes") == 0


async def test_an_unknown_code_signs_in_nobody(db: asyncpg.Connection) -> None:
    await create_code(db, "admin@localhost", True, 60)
    assert await take_code(db, "made-up") is None


async def test_a_new_code_drops_the_expired_ones(db: asyncpg.Connection) -> None:
    await create_code(db, "admin@localhost", True, 60)
    await db.execute("UPDATE a2a_console_codes SET expires_at = now() - interval '1 second'")
    await create_code(db, "admin@localhost", True, 60)
    assert await db.fetchval("SELECT count(*) FROM a2a_console_codes") == 1


async def test_the_token_lasts_the_given_time(db: asyncpg.Connection) -> None:
    code = await create_code(db, "admin@localhost", True, 60)
    caller = await take_code(db, code)
    assert caller is not None
    signed = sign_in(caller, JWT_SECRET, 600)
    claims = jwt.decode(signed.token, JWT_SECRET, algorithms=["HS256"])
    assert claims["exp"] - claims["iat"] == 600
    assert (claims["sub"], claims["is_admin"], claims["permissions"]) == (
        "admin@localhost",
        True,
        ["*"],
    )
