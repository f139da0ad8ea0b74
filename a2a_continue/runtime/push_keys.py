"""The key the gateway signs push deliveries with, shared by every process through PostgreSQL.

The first process to need one generates an ES256 (P-256) key and keeps it, sealed with the
encryption key, in `a2a_push_keys`; every other process (and replica) loads it from there.
``A2AC_PUSH_SIGNING_KEY`` (a PEM private key, EC P-256 or RSA) supplies one instead: it becomes
the current key and the previous one is retired, staying in the JWKS for a day so that
receivers can still verify deliveries signed just before the rotation.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from a2a_continue.runtime.db import Conn
from a2a_continue.runtime.secrets import Sealer

log = logging.getLogger(__name__)

JSON = dict[str, Any]
# How long a delivery JWT is valid (SPEC §12).
JWT_TTL_S = 300
# How long a retired key stays in the JWKS.
RETIRED_KEPT = "1 day"
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

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class SigningKeyError(ValueError):
    """A supplied signing key is not a PEM EC P-256 or RSA private key."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_jwk(key: PrivateKey) -> JSON:
    """The public half of ``key`` as a JWK, with its RFC 7638 thumbprint as ``kid``."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        jwk: JSON = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
        members: tuple[str, ...] = ("crv", "kty", "x", "y")
        alg = "ES256"
    else:
        jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        members = ("e", "kty", "n")
        alg = "RS256"
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    kid = _b64(hashlib.sha256(canonical.encode()).digest())
    return {**{m: jwk[m] for m in members}, "kid": kid, "use": "sig", "alg": alg}


def load_pem(text: str, setting: str = "A2AC_PUSH_SIGNING_KEY") -> PrivateKey:
    """Read a PEM private key (EC P-256 or RSA); ``setting`` names where it came from."""
    try:
        key = serialization.load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(f"{setting} is not a PEM private key ({exc})") from None
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size >= 2048:
        return key
    raise SigningKeyError(f"{setting} must be an EC P-256 or an RSA (>= 2048) key")


def pem(key: PrivateKey) -> str:
    """``key`` as unencrypted PKCS#8 PEM (to be sealed before it is stored)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@dataclass(frozen=True)
class Signer:
    """Signs delivery JWTs with the current key (``kid`` in each header)."""

    key: PrivateKey
    kid: str
    issuer: str

    @property
    def algorithm(self) -> str:
        """ES256 for an EC key, RS256 for an RSA one."""
        return "ES256" if isinstance(self.key, ec.EllipticCurvePrivateKey) else "RS256"

    def sign(self, *, audience: str, delivery_id: str, task_id: str, body: bytes) -> str:
        """The JWT of one delivery attempt (SPEC §12's claims)."""
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": audience,
            "iat": now,
            "exp": now + JWT_TTL_S,
            "jti": delivery_id,
            "taskId": task_id,
            "request_body_sha256": hashlib.sha256(body).hexdigest(),
        }
        return jwt.encode(claims, self.key, algorithm=self.algorithm, headers={"kid": self.kid})


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
