"""Fetch a façade card with a2a-sdk 0.3's own client and verify it with that SDK's verifier.

Run with tests/support/sdk03/.venv/bin/python (a2a-sdk 0.3, `make sdk03-client`):

    verify_card.py CARD_BASE JWKS_URL TOKEN VERSION WHAT TAMPER

VERSION is "" (no A2A-Version header), "0.3" or "1.0"; WHAT is "card" (the public card,
through A2ACardResolver) or "extended" (then the extended card, through the JSON-RPC
transport's get_card); TAMPER is "" or "card" / "extended": change one byte of that answer
before the SDK reads it. Prints "verified" and exits 0, or prints why and exits 3.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import httpx
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from jwt import PyJWK
from jwt.exceptions import PyJWKError

# The one byte changed: the first "e" of the card's description becomes an "E".
MARK = b'"description":"'


class Tampering(httpx.AsyncBaseTransport):
    """Change one byte of the answers to one kind of request (GET: card, POST: extended)."""

    def __init__(self, method: str) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.method = method

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        await response.aclose()
        if request.method == self.method:
            at = body.index(MARK) + len(MARK)
            changed = body[at:].index(b"e") + at
            body = body[:changed] + b"E" + body[changed + 1 :]
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        return httpx.Response(response.status_code, headers=headers, content=body)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def main(base: str, jwks_url: str, token: str, version: str, what: str, tamper: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    if version:
        headers["A2A-Version"] = version
    async with httpx.AsyncClient() as plain:
        keys = {k["kid"]: k for k in (await plain.get(jwks_url)).json()["keys"]}

    def key_provider(kid: str | None, jku: str | None) -> Any:
        if jku != jwks_url or kid not in keys:
            raise PyJWKError(f"no key {kid!r} at {jku!r}")
        return PyJWK(keys[kid])

    verifier = create_signature_verifier(key_provider, ["ES256", "RS256"])
    transport = Tampering("GET" if tamper == "card" else "POST") if tamper else None
    async with httpx.AsyncClient(headers=headers, transport=transport) as http:
        try:
            if what == "extended":
                card = await JsonRpcTransport(http, url=base).get_card(signature_verifier=verifier)
            else:
                card = await A2ACardResolver(http, base).get_agent_card(signature_verifier=verifier)
        except SignatureVerificationError as exc:
            print(f"refused: {type(exc).__name__}: {exc}")
            return 3
    print("verified", card.name)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:7])))
