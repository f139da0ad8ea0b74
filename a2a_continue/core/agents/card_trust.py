"""Trusting an agent's card (SPEC §18): check the signatures of every card fetched, and the
rule that refuses a card whose signature is not verified where one is required."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jwt
import msgspec
import yarl

from a2a_continue.a2a import card_jws
from a2a_continue.a2a.card_jws import Signature, SignatureProblem
from a2a_continue.a2a.key_sets import KeySetUnavailable
from a2a_continue.a2a.netguard import normalize_endpoint_url, url_host
from a2a_continue.core.agents.models import CardKeys
from a2a_continue.errors import AppError, Invalid
from a2a_continue.obs import metrics
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.settings import Network, Settings

log = logging.getLogger(__name__)

JSON = dict[str, Any]

VERIFIED, UNSIGNED, INVALID = "verified", "unsigned", "invalid"


class CardSignatureRefused(AppError):
    status, slug = 422, "card-signature-refused"
    title = "The agent card's signature is not verified"

    def __init__(self, outcome: JSON, what: str) -> None:
        reason = f" ({outcome['reason']})" if outcome.get("reason") else ""
        super().__init__(
            f"the agent card is {outcome['status']}{reason}; {what} needs a verified signature",
            cardSignature=outcome,
        )


@dataclass(frozen=True, slots=True)
class FetchedCard:
    """A card as fetched: its JSON, the URL it came from, the outcome of its check."""

    card: JSON
    url: str
    signature: JSON


def required(settings: Settings, require_signed_card: bool) -> bool:
    """Tell whether an agent's cards must be verified (its own flag, or the gateway's)."""
    return require_signed_card or settings.card_signatures == "require"


def enforce(outcome: JSON, must_verify: bool, what: str) -> None:
    """Refuse (422) a card that is not verified when ``must_verify``; ``what`` names who."""
    if must_verify and outcome["status"] != VERIFIED:
        raise CardSignatureRefused(outcome, what)


def _bad_keys(loc: str, msg: str) -> Invalid:
    return Invalid([{"loc": f"$.cardKeys{loc}", "msg": msg}])


def _check_jwk(jwk: dict[str, Any], index: int) -> None:
    loc = f".keys[{index}]"
    if card_jws.PRIVATE_MEMBERS & jwk.keys():
        raise _bad_keys(loc, "must be a public key (it holds private members)")
    if not any(card_jws.fits(jwk, alg) for alg in card_jws.ALGORITHMS):
        raise _bad_keys(loc, "must be an EC P-256, RSA or Ed25519/Ed448 public key")
    if "kid" in jwk and not isinstance(jwk["kid"], str):
        raise _bad_keys(f"{loc}.kid", "must be a string")
    try:
        jwt.PyJWK(jwk)
    except (jwt.PyJWTError, ValueError, TypeError):
        raise _bad_keys(loc, "is not a usable JWK") from None


def check_card_keys(keys: CardKeys | None, networks: Sequence[Network] = ()) -> CardKeys | None:
    """Check the ``cardKeys`` of a registration: a JWK set URL or public keys, not both."""
    if keys is None:
        return None
    if (keys.jwks_url is None) == (keys.keys is None):
        raise _bad_keys("", "give either 'jwksUrl' or 'keys'")
    if keys.jwks_url is not None:
        url = normalize_endpoint_url(
            keys.jwks_url, networks, loc="$.cardKeys.jwksUrl", what="key sets"
        )
        return msgspec.structs.replace(keys, jwks_url=url)
    for index, jwk in enumerate(keys.keys or []):
        _check_jwk(jwk, index)
    return keys


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """A URL's origin as the HTTP client reads it (scheme, host it connects to, port)."""
    try:
        parts = yarl.URL(url)
        host = url_host(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or parts.user is not None:
        return None
    return parts.scheme, str(host).lower(), parts.port


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def _outcome(status: str, kid: str | None = None, reason: str | None = None) -> JSON:
    return {"status": status, "kid": kid, "reason": reason, "checkedAt": _now()}


class _Check:
    """One card's check: where its keys may come from, and the keys found."""

    def __init__(self, gw: Gateway, card_url: str, keys: JSON | None, timeout_s: float) -> None:
        self.gw = gw
        self.card_origin = _origin(card_url)
        self.registered: list[Any] = list((keys or {}).get("keys") or [])
        self.jwks_url: str | None = (keys or {}).get("jwksUrl")
        self.timeout_s = timeout_s

    async def _fetch(self, url: str, kid: str | None) -> list[JSON]:
        gw = self.gw
        try:
            return await gw.key_sets.keys(
                gw.session, url, kid, self.timeout_s, gw.settings.agent_networks
            )
        except KeySetUnavailable as exc:
            raise SignatureProblem("no-key", str(exc)) from None

    async def keys(self, sig: Signature) -> list[JSON]:
        """The keys that may have made ``sig``: registered ones first, then trusted sets."""

        def fitting(found: list[Any]) -> list[JSON]:
            return [
                k
                for k in found
                if card_jws.fits(k, sig.alg) and (sig.kid is None or k.get("kid") == sig.kid)
            ]

        found = fitting(self.registered)
        if not found and self.jwks_url is not None:
            found = fitting(await self._fetch(self.jwks_url, sig.kid))
        if found:
            return found
        if sig.jku is None or sig.jku == self.jwks_url:
            raise SignatureProblem("no-key", f"no key {sig.kid!r} for {sig.alg}")
        if self.card_origin is None or _origin(sig.jku) != self.card_origin:
            raise SignatureProblem("untrusted-jku", "the jku is not on the card's origin")
        found = fitting(await self._fetch(sig.jku, sig.kid))
        if not found:
            raise SignatureProblem("no-key", f"no key {sig.kid!r} for {sig.alg} at the jku")
        return found

    async def run(self, card: JSON) -> JSON:
        """Verify ``card``'s signatures: the first that holds verifies it."""
        try:
            entries = card_jws.signature_entries(card)
        except SignatureProblem as problem:
            return _outcome(INVALID, None, problem.reason)
        if entries is None:
            return _outcome(UNSIGNED)
        payloads = card_jws.payloads(card)
        first: tuple[str | None, str] | None = None
        for entry in entries:
            kid = None
            try:
                sig = card_jws.read_signature(entry)
                kid = sig.kid
                for jwk in await self.keys(sig):
                    if any(card_jws.verifies(sig, payload, jwk) for payload in payloads):
                        return _outcome(VERIFIED, sig.kid)
                raise SignatureProblem("bad-signature", "no canonical form matches")
            except SignatureProblem as problem:
                log.info("a card signature does not hold: %s", problem)
                first = first or (kid or problem.kid, problem.reason)
        assert first is not None
        return _outcome(INVALID, *first)


async def check_card(
    gw: Gateway, card: JSON, card_url: str, keys: JSON | None, timeout_s: float
) -> JSON:
    """Check a fetched card's signatures; return (and count) its ``cardSignature``."""
    outcome = await _Check(gw, card_url, keys, timeout_s).run(card)
    metrics.card_signature_check(outcome["status"])
    return outcome
