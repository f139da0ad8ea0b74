"""The push signing key: made once, shared through PostgreSQL, supplied, published."""

from __future__ import annotations

import asyncio

import asyncpg
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from a2a_continue.core.push.keys import load_signer, published_keys
from a2a_continue.runtime.db import _init_connection
from a2a_continue.runtime.secrets import Sealer, decode_key, new_key
from a2a_continue.runtime.signing_keys import SigningKeyError, load_pem


@pytest.fixture
async def fresh_keys(db: asyncpg.Connection) -> Sealer:
    await db.execute("DELETE FROM a2a_push_keys")
    return Sealer(decode_key(new_key()))


async def test_processes_starting_at_once_share_one_key(
    database_url: str, fresh_keys: Sealer, db: asyncpg.Connection
) -> None:
    conns = [await asyncpg.connect(database_url) for _ in range(3)]
    for conn in conns:
        await _init_connection(conn)  # the pool's codecs
    try:
        signers = await asyncio.gather(
            *(load_signer(c, fresh_keys, "", "http://gw") for c in conns)
        )
    finally:
        for conn in conns:
            await conn.close()
    assert len({s.kid for s in signers}) == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_push_keys") == 1


async def test_a_supplied_rsa_key_signs_rs256_verifiable_with_the_published_key(
    fresh_keys: Sealer, db: asyncpg.Connection
) -> None:
    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    signer = await load_signer(db, fresh_keys, pem.decode(), "http://gw")
    signed = signer.sign(audience="http://r/h", delivery_id="d1", task_id="T1", body=b"{}")
    assert jwt.get_unverified_header(signed) == {"alg": "RS256", "kid": signer.kid, "typ": "JWT"}
    (jwk,) = (await published_keys(db))["keys"]
    key = jwt.PyJWK(jwk).key
    claims = jwt.decode(signed, key, algorithms=["RS256"], audience="http://r/h")
    assert (claims["iss"], claims["jti"], claims["taskId"]) == ("http://gw", "d1", "T1")


def test_a_supplied_key_that_is_not_a_private_key_is_refused() -> None:
    with pytest.raises(SigningKeyError):
        load_pem("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
