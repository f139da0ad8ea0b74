"""The card signing key: made once, shared through PostgreSQL, supplied, rotated, published."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import msgspec
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from a2a_continue.app import create_app
from a2a_continue.core.agents.card_keys import load_card_signer, published_card_keys
from a2a_continue.runtime.db import _init_connection
from a2a_continue.runtime.secrets import Sealer, decode_key, new_key
from a2a_continue.runtime.signing_keys import SigningKeyError
from a2a_continue.settings import Settings
from tests.support.client import Client
from tests.support.servers import serve_asgi


@pytest.fixture
async def fresh_keys(db: asyncpg.Connection) -> Sealer:
    await db.execute("DELETE FROM a2a_card_keys")
    return Sealer(decode_key(new_key()))


def pem_of(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


async def test_processes_starting_at_once_share_one_card_key(
    database_url: str, fresh_keys: Sealer, db: asyncpg.Connection
) -> None:
    conns = [await asyncpg.connect(database_url) for _ in range(3)]
    for conn in conns:
        await _init_connection(conn)
    try:
        signers = await asyncio.gather(*(load_card_signer(c, fresh_keys, "") for c in conns))
    finally:
        for conn in conns:
            await conn.close()
    assert len({s.kid for s in signers}) == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_card_keys") == 1
    assert isinstance(signers[0].key, ec.EllipticCurvePrivateKey)


async def test_the_card_key_is_kept_sealed_and_loaded_again(
    fresh_keys: Sealer, db: asyncpg.Connection
) -> None:
    made = await load_card_signer(db, fresh_keys, "")
    again = await load_card_signer(db, fresh_keys, "")
    assert again.kid == made.kid
    stored: bytes = await db.fetchval("SELECT private_key FROM a2a_card_keys")
    assert b"PRIVATE KEY" not in stored


async def test_a_supplied_key_becomes_current_and_the_previous_one_stays_published(
    fresh_keys: Sealer, db: asyncpg.Connection
) -> None:
    first = await load_card_signer(db, fresh_keys, "")
    supplied = await load_card_signer(
        db, fresh_keys, pem_of(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    )
    assert supplied.header("http://gw/.well-known/jwks.json") == {
        "alg": "RS256",
        "kid": supplied.kid,
        "typ": "JOSE",
        "jku": "http://gw/.well-known/jwks.json",
    }
    assert [k["kid"] for k in await published_card_keys(db)] == [supplied.kid, first.kid]
    assert all("d" not in k for k in await published_card_keys(db))
    # A day after the rotation the previous key is no longer published.
    await db.execute(
        "UPDATE a2a_card_keys SET retired_at = now() - interval '25 hours' WHERE kid = $1",
        first.kid,
    )
    assert [k["kid"] for k in await published_card_keys(db)] == [supplied.kid]


async def test_a_supplied_card_key_that_cannot_sign_stops_the_start(settings: Settings) -> None:
    broken = msgspec.structs.replace(settings, card_signing_key="not a key")
    with pytest.raises(SigningKeyError, match="A2AC_CARD_SIGNING_KEY"):
        create_app(broken)


@pytest.fixture
async def gateway_client(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    await db.execute("DELETE FROM a2a_card_keys")
    async with serve_asgi(create_app(settings)) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


async def test_the_jwks_publishes_the_card_key_beside_the_push_key(
    gateway_client: Client, db: asyncpg.Connection
) -> None:
    r = await gateway_client.call("GET", "/.well-known/jwks.json", bearer=None)
    assert r.status == 200, r.raw
    card_kid = await db.fetchval("SELECT kid FROM a2a_card_keys WHERE retired_at IS NULL")
    kids = [k["kid"] for k in r.json()["keys"]]
    assert card_kid in kids and len(kids) == len(set(kids))
