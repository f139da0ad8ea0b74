"""The gateway's signing keys in this process: reading and making them, their public JWKs, the
delivery JWTs push signs (SPEC §12) and the card signatures' header (SPEC §18).

The keys themselves are shared by every process through PostgreSQL: push's in
`a2a_push_keys` (core.push.keys), the cards' in `a2a_card_keys` (core.agents.card_keys).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

JSON = dict[str, Any]
# How long a delivery JWT is valid (SPEC §12).
JWT_TTL_S = 300
# How long a retired key stays in the JWKS.
RETIRED_KEPT = "1 day"
CARD_SETTING = "A2AC_CARD_SIGNING_KEY"

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


@dataclass(frozen=True, slots=True)
class CardSigner:
    """The gateway's current card key and its ``kid``."""

    key: PrivateKey
    kid: str

    def header(self, jku: str) -> JSON:
        """The protected header of the gateway's card signatures (SPEC §18)."""
        alg = "ES256" if isinstance(self.key, ec.EllipticCurvePrivateKey) else "RS256"
        return {"alg": alg, "kid": self.kid, "typ": "JOSE", "jku": jku}


def check_supplied(supplied: str) -> None:
    """Refuse a supplied card key that cannot sign (at start, before any card is served)."""
    if supplied:
        load_pem(supplied, CARD_SETTING)


# Signatures kept per process: a card changes seldom, and signing one costs a canonical form
# and a signature for each of its forms.
SIGNED_KEPT = 512


class GatewayCardKey:
    """This process's card signer: loaded (or made) once, then kept; and the signatures it
    made lately, by the card they sign."""

    def __init__(self) -> None:
        self._signer: CardSigner | None = None
        self._lock = asyncio.Lock()
        self._signed: dict[tuple[bytes, str, str], list[JSON]] = {}

    def signed(self, card: bytes, kid: str, jku: str) -> list[JSON] | None:
        """The signatures made for ``card`` (its JSON) with ``kid`` and ``jku``, if kept."""
        return self._signed.get((card, kid, jku))

    def keep(self, card: bytes, kid: str, jku: str, signatures: list[JSON]) -> None:
        """Keep the signatures of ``card`` (the oldest are dropped past SIGNED_KEPT)."""
        if len(self._signed) >= SIGNED_KEPT:
            del self._signed[next(iter(self._signed))]
        self._signed[card, kid, jku] = signatures

    async def signer(self, load: Callable[[], Awaitable[CardSigner]]) -> CardSigner:
        """The signer, calling ``load`` the first time (one caller at a time)."""
        if self._signer is None:
            async with self._lock:
                if self._signer is None:
                    self._signer = await load()
        return self._signer
