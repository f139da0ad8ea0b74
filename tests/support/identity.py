"""A fake identity provider (signing keys, the key set it publishes, the settings naming it)
and how a caller sees its token taken or refused."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.support.client import Client

JSON = dict[str, Any]
ISSUER = "https://idp.example.com/"
AUDIENCE = "a2a-continue"


@dataclass
class Keys:
    """Signing keys of a fake identity provider, and the JWKS it publishes."""

    private: dict[str, Any] = field(default_factory=dict)
    published: list[JSON] = field(default_factory=list)
    fetches: int = 0

    def add_rsa(self, kid: str, publish: bool = True) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private[kid] = key
        if publish:
            self.publish(kid)

    def add_ec(self, kid: str) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        self.private[kid] = key
        self.publish(kid)

    def publish(self, kid: str) -> None:
        key = self.private[kid]
        if isinstance(key, rsa.RSAPrivateKey):
            jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
            jwk["alg"] = "RS256"
        else:
            jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
            jwk["alg"] = "ES256"
        self.published.append({**jwk, "kid": kid, "use": "sig"})

    def sign(self, kid: str, alg: str = "RS256", **claims: Any) -> str:
        body = {
            "sub": "carol@example.com",
            "iss": ISSUER,
            "aud": AUDIENCE,
            "exp": int(time.time()) + 600,
            "permissions": ["*"],
            **claims,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.private[kid], algorithm=alg, headers={"kid": kid})


def idp(url: str, **extra: Any) -> dict[str, Any]:
    return {"jwks_url": url, "jwt_issuer": ISSUER, "jwt_audience": AUDIENCE, **extra}


async def whoami(client: Client, bearer: str) -> Any:
    """Register an agent as the token's caller; return the response (owner = the caller)."""
    body = {"name": "w", "endpointUrl": "http://127.0.0.1:9/", "protocolVersion": "1.0"}
    return await client.call("POST", "/v1/a2a/agents", body, bearer=bearer)


def refused(r: Any) -> str:
    assert r.status == 401, r.raw
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    detail: str = r.json()["detail"]
    return detail
