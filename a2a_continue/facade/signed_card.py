"""The gateway's signatures on the cards the façade serves (SPEC §18)."""

from __future__ import annotations

from typing import Any

import msgspec

from a2a_continue.a2a import card_jws
from a2a_continue.core.agents.card_keys import card_signer
from a2a_continue.runtime.gateway import Gateway

JSON = dict[str, Any]

JWKS_PATH = "/.well-known/jwks.json"


def jwks_url(base_url: str) -> str:
    """The gateway's public JWK set, named by the ``jku`` of its card signatures."""
    return base_url.rstrip("/") + JWKS_PATH


async def signed(gw: Gateway, card: JSON, base_url: str) -> JSON:
    """``card`` signed by the gateway's card key, once per canonical form a client computes."""
    signer = await card_signer(gw)
    jku = jwks_url(base_url)
    unsigned = {k: v for k, v in card.items() if k != "signatures"}
    encoded = msgspec.json.encode(unsigned)
    signatures = gw.card_key.signed(encoded, signer.kid, jku)
    if signatures is None:
        made = card_jws.sign_card(unsigned, signer.key, signer.header(jku))
        signatures = made.get("signatures", [])
        gw.card_key.keep(encoded, signer.kid, jku, signatures)
    return {**unsigned, "signatures": signatures} if signatures else unsigned
