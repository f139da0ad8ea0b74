"""Checking a fetched card's signatures (SPEC §18): real a2a-sdk agents signing their cards
with the SDK's own signer, and what the agent resource records for each."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization

from tests.support.client import Client, register
from tests.support.metrics import moved, scrape
from tests.support.sdk_agent import run_sdk_agent
from tests.support.servers import serve_aiohttp
from tests.support.signed_cards import CardSigning

JSON = dict[str, Any]
AGENTS = "/v1/a2a/agents"
CHECKS = "a2ac_card_signature_checks_total"


@dataclass
class KeyServer:
    """A JWK set served on an origin of its own; what it was asked."""

    url: str = ""
    keys: list[JSON] = field(default_factory=list)
    asked: int = 0


@pytest.fixture
async def key_server() -> AsyncIterator[KeyServer]:
    server = KeyServer()

    async def jwks(_: web.Request) -> web.StreamResponse:
        server.asked += 1
        return web.json_response({"keys": server.keys})

    app = web.Application()
    app.router.add_get("/keys.json", jwks)
    async with serve_aiohttp(app) as base:
        server.url = base + "/keys.json"
        yield server


async def register_from(client: Client, card_url: str, **extra: Any) -> JSON:
    r = await client.call("POST", AGENTS, {"cardUrl": card_url, **extra})
    assert r.status == 201, r.raw
    agent: JSON = r.json()
    return agent


def signature_of(agent: JSON) -> JSON:
    outcome: JSON = dict(agent["cardSignature"])
    checked = dt.datetime.fromisoformat(outcome.pop("checkedAt"))
    assert abs(dt.datetime.now(dt.UTC) - checked) < dt.timedelta(minutes=5)
    return outcome


async def test_a_card_signed_es256_with_a_jku_on_its_origin_is_verified(client: Client) -> None:
    signing = CardSigning()
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = await register_from(client, agent.url)
    assert signature_of(registered) == {"status": "verified", "kid": "agent-key-1", "reason": None}
    assert signing.jwks_asked == 1
    shown = (await client.call("GET", f"{AGENTS}/{registered['id']}")).json()
    assert shown["cardSignature"] == registered["cardSignature"]
    assert shown["cardUrl"] == agent.url + ".well-known/agent-card.json"


async def test_a_card_signed_with_a_key_given_in_card_keys_is_verified(client: Client) -> None:
    signing = CardSigning(jku=None)
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = await register_from(client, agent.url, cardKeys={"keys": [signing.jwk()]})
    assert signature_of(registered) == {"status": "verified", "kid": "agent-key-1", "reason": None}
    assert signing.jwks_asked == 0
    assert registered["cardKeys"] == {"keys": [signing.jwk()]}


async def test_a_jku_that_is_the_registered_jwks_url_is_trusted_on_any_origin(
    client: Client, key_server: KeyServer
) -> None:
    signing = CardSigning(jku="set below")
    signing.jku = key_server.url
    key_server.keys = [signing.jwk()]
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = await register_from(client, agent.url, cardKeys={"jwksUrl": key_server.url})
    assert signature_of(registered)["status"] == "verified"
    assert key_server.asked == 1


async def test_a_jku_on_another_origin_is_untrusted_and_never_fetched(
    client: Client, key_server: KeyServer
) -> None:
    signing = CardSigning(jku="set below")
    signing.jku = key_server.url
    key_server.keys = [signing.jwk()]
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = await register_from(client, agent.url)
    assert signature_of(registered) == {
        "status": "invalid",
        "kid": "agent-key-1",
        "reason": "untrusted-jku",
    }
    assert key_server.asked == 0


async def test_an_unsigned_card_is_recorded_as_unsigned(client: Client) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        registered = await register_from(client, agent.url)
    assert signature_of(registered) == {"status": "unsigned", "kid": None, "reason": None}


async def test_a_card_changed_after_it_was_signed_is_invalid(client: Client) -> None:
    signing = CardSigning(tamper=True)
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = await register_from(client, agent.url)
    assert signature_of(registered) == {
        "status": "invalid",
        "kid": "agent-key-1",
        "reason": "bad-signature",
    }
    assert registered["card"]["description"].endswith("Now with tides.")


@pytest.mark.parametrize("alg", ["HS256", "none"])
async def test_a_card_signed_with_a_shared_secret_or_none_is_invalid_by_its_algorithm(
    client: Client, alg: str
) -> None:
    signing = CardSigning(alg=alg)
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = await register_from(client, agent.url)
    assert signature_of(registered) == {
        "status": "invalid",
        "kid": "agent-key-1",
        "reason": "algorithm",
    }
    assert signing.jwks_asked == 0  # no key is looked for


async def test_a_signature_whose_key_is_nowhere_to_be_found_is_invalid_for_no_key(
    client: Client,
) -> None:
    signing = CardSigning(jku=None)
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = await register_from(client, agent.url)
    assert signature_of(registered)["reason"] == "no-key"


async def test_a_key_of_another_kid_in_card_keys_is_no_key(client: Client) -> None:
    signing = CardSigning(jku=None)
    other = {**signing.jwk(), "kid": "someone-else"}
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = await register_from(client, agent.url, cardKeys={"keys": [other]})
    assert signature_of(registered)["reason"] == "no-key"


@contextlib.asynccontextmanager
async def serving(card: JSON) -> AsyncIterator[str]:
    async def handler(_: web.Request) -> web.StreamResponse:
        return web.json_response(card)

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", handler)
    async with serve_aiohttp(app) as base:
        yield base


PLAIN_CARD: JSON = {
    "name": "Forecaster",
    "description": "d",
    "version": "1",
    "supportedInterfaces": [
        {"url": "http://127.0.0.1:9/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ],
    "capabilities": {},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [],
}


@pytest.mark.parametrize(
    "signatures",
    [
        "not a list",
        [{"protected": "!!!", "signature": "c2ln"}],
        [{"signature": "c2ln"}],
        ["a string"],
    ],
    ids=["not-a-list", "header-not-base64-json", "no-protected-header", "entry-not-an-object"],
)
async def test_signatures_that_cannot_be_read_are_invalid_as_malformed(
    client: Client, signatures: Any
) -> None:
    async with serving({**PLAIN_CARD, "signatures": signatures}) as base:
        registered = await register_from(client, base)
    assert signature_of(registered)["status"] == "invalid"
    assert registered["cardSignature"]["reason"] == "malformed"


async def test_each_check_is_counted_by_its_outcome(client: Client) -> None:
    before = await scrape(client)
    async with run_sdk_agent(card="1.0", signing=CardSigning()) as agent:
        await register_from(client, agent.url)
    async with run_sdk_agent(card="1.0") as agent:
        await register_from(client, agent.url)
    async with run_sdk_agent(card="1.0", signing=CardSigning(tamper=True)) as agent:
        await register_from(client, agent.url)
    after = await scrape(client)
    for outcome in ("verified", "unsigned", "invalid"):
        assert moved(before, after, CHECKS, outcome=outcome) == 1


async def test_an_agent_registered_by_hand_has_no_card_signature(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    shown = (await client.call("GET", f"{AGENTS}/{agent_id}")).json()
    assert (shown["card"], shown["cardSignature"], shown["cardUrl"]) == (None, None, None)


@pytest.mark.parametrize(
    ("card_keys", "loc"),
    [
        ({}, "$.cardKeys"),
        ({"jwksUrl": "http://127.0.0.1:9/k.json", "keys": [{}]}, "$.cardKeys"),
        ({"jwksUrl": "http://169.254.169.254/keys"}, "$.cardKeys.jwksUrl"),
        ({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}, "$.cardKeys.keys[0]"),
        (
            {"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA", "d": "AA"}]},
            "$.cardKeys.keys[0]",
        ),
        ({"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}]}, "$.cardKeys.keys[0]"),
    ],
    ids=["neither", "both", "metadata-address", "shared-secret", "private-key", "not-a-point"],
)
async def test_card_keys_that_are_not_a_key_set_url_or_public_keys_are_refused(
    client: Client, card_keys: JSON, loc: str
) -> None:
    body = {
        "name": "weather",
        "endpointUrl": "http://127.0.0.1:9/",
        "protocolVersion": "1.0",
        "cardKeys": card_keys,
    }
    r = await client.call("POST", AGENTS, body)
    assert r.status == 422, r.raw
    assert r.json()["errors"][0]["loc"] == loc


SDK03_PY = Path(__file__).parents[2] / "support" / "sdk03" / ".venv" / "bin" / "python"
V03_CARD: JSON = {
    "name": "Old forecaster",
    "description": "An agent on a2a-sdk 0.3 — près de la mer.",
    "version": "0.9.0",
    "url": "http://127.0.0.1:9/",
    "protocolVersion": "0.3.0",
    "preferredTransport": "JSONRPC",
    "capabilities": {"streaming": False},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["weather"]}],
}


@pytest.mark.skipif(not SDK03_PY.exists(), reason="run `make sdk03-client`")
async def test_a_card_signed_by_a2a_sdk_0_3_is_verified(client: Client) -> None:
    signing = CardSigning(jku=None)
    pem = signing.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    given = {"card": V03_CARD, "pem": pem, "header": {"alg": "ES256", "kid": signing.kid}}
    script = str(SDK03_PY.parents[2] / "sign_card.py")
    done = await asyncio.to_thread(
        subprocess.run,
        [str(SDK03_PY), script],
        input=json.dumps(given),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    async with serving(json.loads(done.stdout)) as base:
        registered = await register_from(client, base, cardKeys={"keys": [signing.jwk()]})
    assert signature_of(registered) == {"status": "verified", "kid": "agent-key-1", "reason": None}
