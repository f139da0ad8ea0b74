"""Agent card signatures on the wire: the forms a card is signed in, JWS signing and checking.

A card signature is a JWS (RFC 7515) with a detached payload: ``protected`` (the base64url
protected header) and ``signature``; the payload is the card canonicalized without its
``signatures`` member. Which canonical form depends on who computes it, so a card has up to
three: RFC 8785 of the card's JSON as it is, and the forms a2a-sdk 1.x and a2a-sdk 0.3 read
the card into (``card_form10``, ``card_form03``). A signature over any of them holds.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import jwt
import rfc8785
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt import api_jws

from a2a_continue.a2a import card_form03, card_form10

JSON = dict[str, Any]

# The algorithms a card may be signed with: never `none`, never a shared secret (HMAC).
ALGORITHMS = ("ES256", "RS256", "EdDSA")
# The key types each algorithm takes (kty, and crv where it has one).
_KEY_TYPES: dict[str, set[tuple[str, str | None]]] = {
    "ES256": {("EC", "P-256")},
    "RS256": {("RSA", None)},
    "EdDSA": {("OKP", "Ed25519"), ("OKP", "Ed448")},
}
# A JWK's members that hold a private key: such a member makes the JWK no public key.
PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class SignatureProblem(ValueError):
    """A signature that cannot hold; ``reason`` is its SPEC §18 reason."""

    def __init__(self, reason: str, detail: str, kid: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.kid = kid


@dataclass(frozen=True, slots=True)
class Signature:
    """One entry of a card's ``signatures``, its protected header read."""

    protected: str
    value: str
    alg: str
    kid: str | None
    jku: str | None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def payloads(card: JSON) -> list[bytes]:
    """Every canonical form of ``card`` (its ``signatures`` left out), each once."""
    unsigned = {k: v for k, v in card.items() if k != "signatures"}
    found: list[bytes] = []
    forms = (rfc8785.dumps, card_form10.form, card_form03.form)
    for form in forms:
        try:
            payload = form(unsigned)
        except (card_form10.FormError, rfc8785.CanonicalizationError, RecursionError):
            continue
        if payload not in found:
            found.append(payload)
    return found


def signature_entries(card: JSON) -> list[Any] | None:
    """The card's ``signatures`` (None when it has none); a non-list is malformed."""
    entries = card.get("signatures")
    if entries is None or entries == []:
        return None
    if not isinstance(entries, list):
        raise SignatureProblem("malformed", "the card's signatures are not a list")
    return entries


def read_signature(entry: Any) -> Signature:
    """Read one signature entry and its protected header; raise SignatureProblem."""
    if not isinstance(entry, dict):
        raise SignatureProblem("malformed", "a signature is not an object")
    protected, value = entry.get("protected"), entry.get("signature")
    if not isinstance(protected, str) or not protected:
        raise SignatureProblem("malformed", "a signature has no protected header")
    try:
        header = json.loads(_unb64(protected))
    except (binascii.Error, ValueError):
        raise SignatureProblem("malformed", "a protected header is not base64url JSON") from None
    if not isinstance(header, dict):
        raise SignatureProblem("malformed", "a protected header is not an object")
    alg, kid, jku = header.get("alg"), header.get("kid"), header.get("jku")
    if (kid is not None and not isinstance(kid, str)) or (
        jku is not None and not isinstance(jku, str)
    ):
        raise SignatureProblem("malformed", "a protected header's kid or jku is not a string")
    # The algorithm first: an unsigned `none` JWS has no signature to find missing.
    if not isinstance(alg, str) or alg not in ALGORITHMS:
        raise SignatureProblem("algorithm", f"the algorithm {alg!r} is not allowed", kid)
    if "crit" in header or header.get("b64", True) is not True:
        raise SignatureProblem("malformed", "a protected header asks for an extension", kid)
    if not isinstance(value, str) or not value:
        raise SignatureProblem("malformed", "a signature has no 'signature'", kid)
    return Signature(protected, value, alg, kid, jku)


def fits(jwk: Any, alg: str) -> bool:
    """Tell whether ``jwk`` is a public key of the type ``alg`` verifies with."""
    if not isinstance(jwk, dict) or PRIVATE_MEMBERS & jwk.keys():
        return False
    declared = jwk.get("alg")
    if declared is not None and declared != alg:
        return False
    if jwk.get("use") not in (None, "sig"):
        return False
    return (jwk.get("kty"), jwk.get("crv")) in _KEY_TYPES.get(alg, set())


def verifies(signature: Signature, payload: bytes, jwk: JSON) -> bool:
    """Tell whether ``signature`` is ``jwk``'s over ``payload``."""
    token = f"{signature.protected}.{_b64(payload)}.{signature.value}"
    try:
        key = jwt.PyJWK(jwk, algorithm=signature.alg)
        api_jws.decode_complete(token, key.key, algorithms=[signature.alg])
    except (jwt.PyJWTError, ValueError, TypeError):
        return False
    return True


def sign(payload: bytes, key: PrivateKey, header: JSON) -> JSON:
    """One signature entry over ``payload`` (detached) with ``header`` protected."""
    compact = api_jws.encode(payload, key, algorithm=header["alg"], headers=header)
    protected, _, signature = compact.split(".")
    return {"protected": protected, "signature": signature}


def sign_card(card: JSON, key: PrivateKey, header: JSON) -> JSON:
    """``card`` with one signature of ``key`` per canonical form, replacing its own."""
    unsigned = {k: v for k, v in card.items() if k != "signatures"}
    signatures = [sign(payload, key, header) for payload in payloads(unsigned)]
    return {**unsigned, "signatures": signatures} if signatures else unsigned
