"""Registering and refreshing from a card under A2AC_CARD_SIGNATURES=require (or an agent's
requireSignedCard): an unverified card is refused with 422, and nothing is stored."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.client import Client, assert_problem, register
from tests.support.metrics import moved, scrape
from tests.support.sdk_agent import run_sdk_agent
from tests.support.servers import serve_asgi
from tests.support.signed_cards import CardSigning

JSON = dict[str, Any]
AGENTS = "/v1/a2a/agents"
REFUSED = "urn:a2a-continue:problem:card-signature-refused"


@pytest.fixture
async def strict(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    """A client of a gateway with A2AC_CARD_SIGNATURES=require."""
    required = msgspec.structs.replace(settings, card_signatures="require")
    async with serve_asgi(create_app(required)) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


async def agents_stored(db: asyncpg.Connection) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM a2a_agents")
    return count


def refusal(r: Any) -> JSON:
    problem = assert_problem(r, 422)
    assert problem["type"] == REFUSED
    outcome: JSON = problem["cardSignature"]
    assert outcome["status"] in problem["detail"]
    return outcome


async def test_require_refuses_an_unsigned_card_at_registration_storing_nothing(
    strict: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        r = await strict.call("POST", AGENTS, {"cardUrl": agent.url})
    outcome = refusal(r)
    assert (outcome["status"], outcome["reason"]) == ("unsigned", None)
    assert await agents_stored(db) == 0


@pytest.mark.parametrize(
    ("signing", "reason"),
    [
        (CardSigning(tamper=True), "bad-signature"),
        (CardSigning(alg="HS256"), "algorithm"),
        (CardSigning(alg="none"), "algorithm"),
        (CardSigning(jku=None), "no-key"),
    ],
    ids=["tampered", "hs256", "none", "no-key"],
)
async def test_require_refuses_an_invalid_card_at_registration_naming_its_reason(
    strict: Client, db: asyncpg.Connection, signing: CardSigning, reason: str
) -> None:
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        r = await strict.call("POST", AGENTS, {"cardUrl": agent.url})
    outcome = refusal(r)
    assert (outcome["status"], outcome["reason"]) == ("invalid", reason)
    assert reason in r.json()["detail"]
    assert await agents_stored(db) == 0


async def test_require_registers_an_agent_whose_card_is_verified(strict: Client) -> None:
    async with run_sdk_agent(card="1.0", signing=CardSigning()) as agent:
        r = await strict.call("POST", AGENTS, {"cardUrl": agent.url})
    assert r.status == 201, r.raw
    assert r.json()["cardSignature"]["status"] == "verified"


async def test_require_still_registers_an_agent_by_hand(strict: Client) -> None:
    agent_id = await register(strict, "http://127.0.0.1:9/", "1.0")
    shown = (await strict.call("GET", f"{AGENTS}/{agent_id}")).json()
    assert shown["cardSignature"] is None


async def test_an_agent_that_requires_a_signed_card_is_refused_an_unsigned_one_under_record(
    client: Client, db: asyncpg.Connection
) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        r = await client.call("POST", AGENTS, {"cardUrl": agent.url, "requireSignedCard": True})
        assert refusal(r)["status"] == "unsigned"
        assert await agents_stored(db) == 0
        plain = await client.call("POST", AGENTS, {"cardUrl": agent.url})
    assert plain.status == 201, plain.raw
    assert plain.json()["requireSignedCard"] is False


async def test_a_refresh_under_require_whose_card_fails_is_refused_and_keeps_the_stored_card(
    strict: Client, caplog: pytest.LogCaptureFixture
) -> None:
    signing = CardSigning()
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = (await strict.call("POST", AGENTS, {"cardUrl": agent.url})).json()
        signing.tamper = True
        before = await scrape(strict)
        with caplog.at_level(logging.WARNING, "a2a_continue.core.agents.cards"):
            r = await strict.call("PATCH", f"{AGENTS}/{registered['id']}", {"cardUrl": agent.url})
        after = await scrape(strict)
    outcome = refusal(r)
    assert (outcome["status"], outcome["reason"]) == ("invalid", "bad-signature")
    shown = (await strict.call("GET", f"{AGENTS}/{registered['id']}")).json()
    assert shown["card"] == registered["card"]
    assert shown["cardSignature"] == registered["cardSignature"]
    assert shown["updatedAt"] == registered["updatedAt"]
    assert moved(before, after, "a2ac_card_signature_checks_total", outcome="invalid") == 1
    assert any(registered["id"] in m and "kept" in m for m in caplog.messages)


async def test_a_refresh_under_require_refuses_every_change_it_carries(strict: Client) -> None:
    signing = CardSigning()
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = (await strict.call("POST", AGENTS, {"cardUrl": agent.url})).json()
        signing.tamper = True
        change = {"cardUrl": agent.url, "name": "renamed", "visibility": "public"}
        r = await strict.call("PATCH", f"{AGENTS}/{registered['id']}", change)
    refusal(r)
    shown = (await strict.call("GET", f"{AGENTS}/{registered['id']}")).json()
    assert (shown["name"], shown["visibility"]) == (registered["name"], "private")


async def test_a_refresh_under_record_stores_the_new_card_and_its_outcome(client: Client) -> None:
    signing = CardSigning()
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = (await client.call("POST", AGENTS, {"cardUrl": agent.url})).json()
        signing.tamper = True
        r = await client.call("PATCH", f"{AGENTS}/{registered['id']}", {"cardUrl": agent.url})
    assert r.status == 200, r.raw
    refreshed = r.json()
    assert refreshed["card"]["description"].endswith("Now with tides.")
    assert refreshed["cardSignature"]["status"] == "invalid"
    assert refreshed["cardSignature"]["reason"] == "bad-signature"


async def test_a_refresh_that_turns_on_require_signed_card_is_held_to_it(client: Client) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        registered = (await client.call("POST", AGENTS, {"cardUrl": agent.url})).json()
        change = {"cardUrl": agent.url, "requireSignedCard": True}
        r = await client.call("PATCH", f"{AGENTS}/{registered['id']}", change)
    assert refusal(r)["status"] == "unsigned"
    shown = (await client.call("GET", f"{AGENTS}/{registered['id']}")).json()
    assert shown["requireSignedCard"] is False


async def test_a_refresh_checks_the_card_with_the_keys_it_registers(client: Client) -> None:
    signing = CardSigning(jku=None)
    async with run_sdk_agent(card="1.0", signing=signing) as agent:
        registered = (await client.call("POST", AGENTS, {"cardUrl": agent.url})).json()
        assert registered["cardSignature"]["reason"] == "no-key"
        change = {"cardUrl": agent.url, "cardKeys": {"keys": [signing.jwk()]}}
        r = await client.call("PATCH", f"{AGENTS}/{registered['id']}", change)
    assert r.status == 200, r.raw
    assert r.json()["cardSignature"]["status"] == "verified"
    assert r.json()["cardKeys"] == {"keys": [signing.jwk()]}


async def test_an_endpoint_changed_by_hand_leaves_no_card_and_no_card_signature(
    client: Client,
) -> None:
    async with run_sdk_agent(card="1.0", signing=CardSigning()) as agent:
        registered = (await client.call("POST", AGENTS, {"cardUrl": agent.url})).json()
    change = {"endpointUrl": "http://127.0.0.1:9/other"}
    r = await client.call("PATCH", f"{AGENTS}/{registered['id']}", change)
    assert r.status == 200, r.raw
    assert (r.json()["card"], r.json()["cardSignature"], r.json()["cardUrl"]) == (None, None, None)
