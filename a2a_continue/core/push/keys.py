"""The key the gateway signs push deliveries with, shared by every process through PostgreSQL
(`a2a_push_keys`, owned here).

The first process to need one generates an ES256 (P-256) key and keeps it, sealed with the
encryption key, in `a2a_push_keys`; every other process (and replica) loads it from there.
``A2AC_PUSH_SIGNING_KEY`` (a PEM private key, EC P-256 or RSA) supplies one instead: it becomes
the current key and the previous one is retired, staying in the JWKS for a day so that
receivers can still verify deliveries signed just before the rotation.
"""

from __future__ import annotations

import logging

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric import ec

from a2a_continue.runtime.db import Conn
from a2a_continue.runtime.secrets import Sealer
from a2a_continue.runtime.signing_keys import (
    JSON,
    RETIRED_KEPT,
    PrivateKey,
    Signer,
    load_pem,
    pem,
    public_jwk,
)

log = logging.getLogger(__name__)

_SEAL_CONTEXT = b"a2ac-push-signing-key"
# Taken while a process looks for the key and, finding none, makes it (one key, not two).
_KEY_LOCK = 0x61326163_70757368

SELECT_CURRENT = """SELECT kid, private_key FROM a2a_push_keys WHERE retired_at IS NULL
ORDER BY created_at DESC LIMIT 1"""

INSERT_KEY = """INSERT INTO a2a_push_keys (kid, private_key, public_jwk) VALUES ($1, $2, $3)
ON CONFLICT (kid) DO UPDATE SET retired_at = NULL"""

RETIRE_OTHERS = "UPDATE a2a_push_keys SET retired_at = now() WHERE kid <> $1 AND retired_at IS NULL"

SELECT_PUBLISHED = f"""SELECT public_jwk FROM a2a_push_keys
WHERE retired_at IS NULL OR retired_at > now() - interval '{RETIRED_KEPT}'
ORDER BY created_at DESC"""


async def load_signer(conn: Conn, sealer: Sealer, supplied: str, issuer: str) -> Signer:
    """The current signing key: the supplied one (made current), the stored one, or a new one
    made once (under an advisory lock, so concurrent processes agree on one)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _KEY_LOCK)
        if supplied:
            key = load_pem(supplied)
            jwk = public_jwk(key)
            await _store(conn, sealer, key, jwk)
            await conn.execute(RETIRE_OTHERS, jwk["kid"])
            return Signer(key, jwk["kid"], issuer)
        row = await conn.fetchrow(SELECT_CURRENT)
        if row is not None:
            try:
                text = sealer.open(row["private_key"], _SEAL_CONTEXT)
                return Signer(load_pem(str(text)), row["kid"], issuer)
            except InvalidTag:
                # Sealed with another encryption key: that key is lost to us; make a new one.
                log.warning("the stored push signing key cannot be opened; making a new one")
        key = ec.generate_private_key(ec.SECP256R1())
        jwk = public_jwk(key)
        await _store(conn, sealer, key, jwk)
        await conn.execute(RETIRE_OTHERS, jwk["kid"])
        return Signer(key, jwk["kid"], issuer)


async def _store(conn: Conn, sealer: Sealer, key: PrivateKey, jwk: JSON) -> None:
    await conn.execute(INSERT_KEY, jwk["kid"], sealer.seal(pem(key), _SEAL_CONTEXT), jwk)


async def published_keys(conn: Conn) -> JSON:
    """The JWKS: the current key and those retired within the last day."""
    rows = await conn.fetch(SELECT_PUBLISHED)
    return {"keys": [row["public_jwk"] for row in rows]}
