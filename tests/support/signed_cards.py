"""Agent cards signed the way an a2a-sdk agent signs its own: the SDK's signer, a key of the
agent's, its JWK set served beside the card."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.signing import create_agent_card_signer
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

JSON = dict[str, Any]

# An HS256 secret: a shared secret, which a card signature must never rest on.
SHARED_SECRET = b"a-secret-the-agent-and-its-callers-share"
OWN_JWKS = "/jwks.json"


@dataclass
class CardSigning:
    """How an SDK agent signs the card it serves; changeable while the agent runs.

    ``alg`` ES256 signs with ``key``; HS256 with ``SHARED_SECRET``; ``none`` with nothing.
    ``jku`` "own" names the agent's own JWK set (on the card's origin), None names none,
    anything else is that URL. ``tamper`` changes the card after it is signed.
    """

    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    alg: str = "ES256"
    kid: str = "agent-key-1"
    jku: str | None = "own"
    tamper: bool = False
    jwks_asked: int = 0

    def jwk(self) -> JSON:
        """The agent's public key as a JWK, with its kid."""
        jwk: JSON = ECAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "alg": "ES256", "use": "sig"}

    def header(self, agent_url: str) -> Any:
        """The protected header of the agent's signature."""
        header: JSON = {"alg": self.alg, "kid": self.kid, "typ": "JOSE"}
        if self.jku is not None:
            header["jku"] = agent_url.rstrip("/") + OWN_JWKS if self.jku == "own" else self.jku
        return header

    def apply(self, agent_url: str, card: AgentCard) -> AgentCard:
        """Sign ``card`` with the SDK's own signer (then change it, when tampering)."""
        signing_key: Any = {"ES256": self.key, "HS256": SHARED_SECRET}.get(self.alg, "")
        signer = create_agent_card_signer(signing_key, self.header(agent_url))
        signed = AgentCard()
        signed.CopyFrom(card)
        signed = signer(signed)
        if self.tamper:
            signed.description += " Now with tides."
        return signed

    def jwks_route(self) -> Route:
        """The agent's JWK set, counting how often it is asked for."""

        async def jwks(_: Request) -> JSONResponse:
            self.jwks_asked += 1
            return JSONResponse({"keys": [self.jwk()]})

        return Route(OWN_JWKS, jwks, methods=["GET"])
