"""The extended card through the façade is checked like any card fetched (SPEC §18): counted
by outcome, and not passed on unverified for an agent whose cards must be signed."""

from __future__ import annotations

from tests.support import bindings as b
from tests.support.client import Client
from tests.support.metrics import moved, scrape
from tests.support.sdk_agent import run_sdk_agent
from tests.support.signed_cards import CardSigning

CHECKS = "a2ac_card_signature_checks_total"


async def test_the_extended_card_is_checked_and_its_outcome_counted(client: Client) -> None:
    signing = CardSigning()
    async with run_sdk_agent(card="1.0", signing=signing, extended=True) as agent:
        registered = (await client.call("POST", "/v1/a2a/agents", {"cardUrl": agent.url})).json()
        before = await scrape(client)
        r = await b.extended_card(client, registered["id"], b.JSONRPC, "1.0")
        after = await scrape(client)
    card = b.result(r, b.JSONRPC, "1.0")
    assert card["name"] == "SDK weather agent (extended)"
    assert moved(before, after, CHECKS, outcome="verified") == 1
    assert signing.kid not in r.raw.decode()  # the gateway's signatures, not the agent's


async def test_an_unverified_extended_card_is_not_passed_on_for_an_agent_that_requires_one(
    client: Client,
) -> None:
    signing = CardSigning()
    async with run_sdk_agent(card="1.0", signing=signing, extended=True) as agent:
        body = {"cardUrl": agent.url, "requireSignedCard": True}
        registered = (await client.call("POST", "/v1/a2a/agents", body)).json()
        assert registered["cardSignature"]["status"] == "verified"
        signing.tamper = True
        r = await b.extended_card(client, registered["id"], b.JSONRPC, "1.0")
    refused = b.refusal(r, b.JSONRPC, "1.0")
    assert refused.code == -32603
    assert "bad-signature" in refused.message
    assert "Now with tides" not in r.raw.decode()


async def test_an_unverified_extended_card_is_passed_on_signed_by_the_gateway_under_record(
    client: Client,
) -> None:
    signing = CardSigning()
    async with run_sdk_agent(card="1.0", signing=signing, extended=True) as agent:
        registered = (await client.call("POST", "/v1/a2a/agents", {"cardUrl": agent.url})).json()
        signing.tamper = True
        r = await b.extended_card(client, registered["id"], b.JSONRPC, "1.0")
    card = b.result(r, b.JSONRPC, "1.0")
    assert card["description"].endswith("Now with tides.")
    assert card["signatures"]
