"""The key the gateway signs the agent cards it serves with, shared through PostgreSQL
(`a2a_card_keys`, owned here).

Like the push key (core.push.keys): the first process to need one generates an EC P-256 key
and keeps it, sealed with the encryption key, in `a2a_card_keys`; every other process (and
replica) loads it from there. ``A2AC_CARD_SIGNING_KEY`` (a PEM private key, EC P-256 or RSA)
supplies one instead: it becomes the current key and the previous one is retired, staying
in the JWKS for a day so that a card signed just before the rotation still verifies.
"""

from __future__ import annotations

import logging

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric import ec

from a2a_continue.runtime.db import Conn
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.secrets import Sealer
from a2a_continue.runtime.signing_keys import (
    CARD_SETTING,
    JSON,
    RETIRED_KEPT,
    CardSigner,
    PrivateKey,
    load_pem,
    pem,
    public_jwk,
)

log = logging.getLogger(__name__)

_SEAL_CONTEXT = b"a2ac-card-signing-key"
# Taken while a process looks for the key and, finding none, makes it (one key, not two).
_KEY_LOCK = 0x61326163_63617264

SELECT_CURRENT = """SELECT kid, private_key FROM a2a_card_keys WHERE retired_at IS NULL
ORDER BY created_at DESC LIMIT 1"""

INSERT_KEY = """INSERT INTO a2a_card_keys (kid, private_key, public_jwk) VALUES ($1, $2, $3)
ON CONFLICT (kid) DO UPDATE SET retired_at = NULL"""

RETIRE_OTHERS = "UPDATE a2a_card_keys SET retired_at = now() WHERE kid <> $1 AND retired_at IS NULL"

SELECT_PUBLISHED = f"""SELECT public_jwk FROM a2a_card_keys
WHERE retired_at IS NULL OR retired_at > now() - interval '{RETIRED_KEPT}'
ORDER BY created_at DESC"""


async def _store(conn: Conn, sealer: Sealer, key: PrivateKey) -> CardSigner:
    jwk = public_jwk(key)
    await conn.execute(INSERT_KEY, jwk["kid"], sealer.seal(pem(key), _SEAL_CONTEXT), jwk)
    await conn.execute(RETIRE_OTHERS, jwk["kid"])
    return CardSigner(key, jwk["kid"])


async def load_card_signer(conn: Conn, sealer: Sealer, supplied: str) -> CardSigner:
    """The current card key: the supplied one (made current), the stored one, or a new one
    made once (under an advisory lock, so concurrent processes agree on one)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _KEY_LOCK)
        if supplied:
            return await _store(conn, sealer, load_pem(supplied, CARD_SETTING))
        row = await conn.fetchrow(SELECT_CURRENT)
        if row is not None:
            try:
                text = sealer.open(row["private_key"], _SEAL_CONTEXT)
                return CardSigner(load_pem(str(text), CARD_SETTING), row["kid"])
            except InvalidTag:
                # Sealed with another encryption key: that key is lost to us; make a new one.
                log.warning("the stored card signing key cannot be opened; making a new one")
        return await _store(conn, sealer, ec.generate_private_key(ec.SECP256R1()))


async def published_card_keys(conn: Conn) -> list[JSON]:
    """The card keys of the JWKS: the current one and those retired within the last day."""
    return [row["public_jwk"] for row in await conn.fetch(SELECT_PUBLISHED)]


async def card_signer(gw: Gateway) -> CardSigner:
    """The key the façade signs cards with (loaded, made or rotated once per process)."""

    async def load() -> CardSigner:
        async with gw.connection() as conn:
            return await load_card_signer(conn, gw.sealer, gw.settings.card_signing_key)

    return await gw.card_key.signer(load)
