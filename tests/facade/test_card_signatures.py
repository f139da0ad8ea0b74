"""Every card the façade serves is signed by the gateway (SPEC §18): the official SDKs' card
resolvers, with their own signature verifiers keyed to the gateway's JWKS, accept each card,
both versions, public and extended; with one byte changed they refuse it."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types.a2a_pb2 import AgentCard, GetExtendedAgentCardRequest
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from tests.support.client import Client, token
from tests.support.facade_clients import card_base
from tests.support.sdk_agent import SdkAgent, run_sdk_agent

JSON = dict[str, Any]
SDK03 = Path(__file__).parent.parent / "support" / "sdk03"
SDK03_PY = SDK03 / ".venv" / "bin" / "python"
VERSIONS = pytest.mark.parametrize("version", [None, "1.0", "0.3"], ids=["both", "1.0", "0.3"])
needs_sdk03 = pytest.mark.skipif(
    not SDK03_PY.exists(), reason="a2a-sdk 0.3 is not installed: run `make sdk03-client`"
)
MARK = b'"description":"'


class Tampering(httpx.AsyncBaseTransport):
    """Change one byte (an "e" of the description) of the answers to ``method`` requests."""

    def __init__(self, method: str) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.method = method
        self.changed = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        await response.aclose()
        if request.method == self.method:
            at = body.index(MARK) + len(MARK)
            changed = body[at:].index(b"e") + at
            body = body[:changed] + b"E" + body[changed + 1 :]
            self.changed += 1
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        return httpx.Response(response.status_code, headers=headers, content=body)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def registered(client: Client) -> AsyncIterator[tuple[SdkAgent, str]]:
    """An a2a-sdk agent that serves an extended card, registered from its (unsigned) card."""
    async with run_sdk_agent(card="1.0", extended=True) as agent:
        r = await client.call("POST", "/v1/a2a/agents", {"cardUrl": agent.url})
        assert r.status == 201, r.raw
        yield agent, str(r.json()["id"])


def jwks_url(gateway_url: str) -> str:
    return f"{gateway_url}/.well-known/jwks.json"


async def gateway_verifier(gateway_url: str) -> Any:
    """The SDK's verifier, its keys the gateway's JWKS (and only for the gateway's jku)."""
    async with httpx.AsyncClient() as http:
        keys = {k["kid"]: k for k in (await http.get(jwks_url(gateway_url))).json()["keys"]}

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        if jku != jwks_url(gateway_url) or kid not in keys:
            raise PyJWKError(f"no key {kid!r} at {jku!r}")
        return PyJWK(keys[kid])

    return create_signature_verifier(key_provider, ["ES256", "RS256"])


def headers(version: str | None) -> dict[str, str]:
    sent = {"Authorization": f"Bearer {token()}"}
    return sent if version is None else {**sent, "A2A-Version": version}


async def resolve(
    gateway_url: str, agent_id: str, version: str | None, tamper: Tampering | None = None
) -> AgentCard:
    """The façade card through a2a-sdk 1.x's card resolver and its signature verifier."""
    verifier = await gateway_verifier(gateway_url)
    async with httpx.AsyncClient(headers=headers(version), transport=tamper) as http:
        resolver = A2ACardResolver(http, card_base(gateway_url, agent_id))
        return await resolver.get_agent_card(signature_verifier=verifier)


@VERSIONS
async def test_the_sdk_verifier_accepts_each_facade_card(
    gateway_url: str, registered: tuple[SdkAgent, str], version: str | None
) -> None:
    card = await resolve(gateway_url, registered[1], version)
    assert card.name == "SDK weather agent"


@VERSIONS
async def test_the_sdk_verifier_refuses_a_facade_card_with_one_byte_changed(
    gateway_url: str, registered: tuple[SdkAgent, str], version: str | None
) -> None:
    tamper = Tampering("GET")
    with pytest.raises(SignatureVerificationError):
        await resolve(gateway_url, registered[1], version, tamper)
    assert tamper.changed == 1


async def extended_through_sdk(
    gateway_url: str, agent_id: str, tamper: Tampering | None = None
) -> AgentCard:
    verifier = await gateway_verifier(gateway_url)
    async with httpx.AsyncClient(headers=headers(None), transport=tamper) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http))
        client = await factory.create_from_url(
            card_base(gateway_url, agent_id), signature_verifier=verifier
        )
        try:
            return await client.get_extended_agent_card(
                GetExtendedAgentCardRequest(), signature_verifier=verifier
            )
        finally:
            await client.close()


async def test_the_sdk_verifier_accepts_the_extended_card(
    gateway_url: str, registered: tuple[SdkAgent, str]
) -> None:
    card = await extended_through_sdk(gateway_url, registered[1])
    assert card.name == "SDK weather agent (extended)"


async def test_the_sdk_verifier_refuses_the_extended_card_with_one_byte_changed(
    gateway_url: str, registered: tuple[SdkAgent, str]
) -> None:
    tamper = Tampering("POST")
    with pytest.raises(SignatureVerificationError):
        await extended_through_sdk(gateway_url, registered[1], tamper)
    assert tamper.changed == 1


async def sdk03(
    gateway_url: str, agent_id: str, version: str | None, what: str, tamper: str = ""
) -> tuple[int, str]:
    """Run a2a-sdk 0.3's client and verifier on a façade card (tests/support/sdk03)."""
    args = (card_base(gateway_url, agent_id), jwks_url(gateway_url), token(), version or "")
    process = await asyncio.create_subprocess_exec(
        str(SDK03_PY),
        str(SDK03 / "verify_card.py"),
        *args,
        what,
        tamper,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode in (0, 3), err.decode()
    return process.returncode, out.decode()


@needs_sdk03
@pytest.mark.parametrize("version", [None, "0.3"], ids=["both", "0.3"])
async def test_the_0_3_sdk_verifier_accepts_each_facade_card_it_reads(
    gateway_url: str, registered: tuple[SdkAgent, str], version: str | None
) -> None:
    assert await sdk03(gateway_url, registered[1], version, "card") == (
        0,
        "verified SDK weather agent\n",
    )
    refused, said = await sdk03(gateway_url, registered[1], version, "card", tamper="card")
    assert refused == 3, said


@needs_sdk03
async def test_the_0_3_sdk_verifier_accepts_the_extended_card(
    gateway_url: str, registered: tuple[SdkAgent, str]
) -> None:
    assert await sdk03(gateway_url, registered[1], "0.3", "extended") == (
        0,
        "verified SDK weather agent (extended)\n",
    )
    refused, said = await sdk03(gateway_url, registered[1], "0.3", "extended", tamper="extended")
    assert refused == 3, said


def protected(signature: JSON) -> JSON:
    text = signature["protected"]
    header: JSON = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    return header


@VERSIONS
async def test_each_signature_is_the_gateway_key_over_one_canonical_form(
    client: Client, gateway_url: str, registered: tuple[SdkAgent, str], version: str | None
) -> None:
    extra = {} if version is None else {"A2A-Version": version}
    path = f"/a2a/{registered[1]}/.well-known/agent-card.json"
    card = (await client.call("GET", path, headers=extra)).json()
    jwks = (await client.call("GET", "/.well-known/jwks.json", bearer=None)).json()
    headers_seen = [protected(s) for s in card["signatures"]]
    # RFC 8785 of the served JSON and a2a-sdk 1.x's form; a card 0.3 reads adds 0.3's.
    assert len(headers_seen) == (2 if version == "1.0" else 3)
    [kid] = {h["kid"] for h in headers_seen}
    assert kid in {k["kid"] for k in jwks["keys"]}
    for header in headers_seen:
        assert header == {"alg": "ES256", "kid": kid, "typ": "JOSE", "jku": jwks_url(gateway_url)}


async def test_a_card_is_signed_once_and_its_signatures_served_again(
    client: Client, registered: tuple[SdkAgent, str]
) -> None:
    path = f"/a2a/{registered[1]}/.well-known/agent-card.json"
    first = (await client.call("GET", path)).json()
    again = (await client.call("GET", path)).json()
    # ECDSA signatures differ at each signing: the same ones are the kept ones.
    assert again["signatures"] == first["signatures"]
    other = (await client.call("GET", path, headers={"A2A-Version": "1.0"})).json()
    assert not {s["signature"] for s in other["signatures"]} & {
        s["signature"] for s in first["signatures"]
    }
