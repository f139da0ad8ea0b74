"""The agent card at the gateway: the agent's description, the gateway's endpoints and security."""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.compat.v0_3 import types as v03

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.client import Client, register, token
from tests.support.servers import serve_asgi

JSON = dict[str, Any]

AGENT_CARD = {
    "name": "Forecaster",
    "description": "Gives the weather.",
    "version": "2.3.0",
    "supportedInterfaces": [
        {"url": "http://10.0.0.7:9000/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "grpc://10.0.0.7:9001", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
    ],
    "capabilities": {"streaming": False, "pushNotifications": True, "extensions": []},
    "securitySchemes": {"agentKey": {"apiKeySecurityScheme": {"location": "header", "name": "K"}}},
    "securityRequirements": [{"schemes": {"agentKey": {"list": []}}}],
    "signatures": [{"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln"}],
    "defaultInputModes": ["text/plain", "application/json"],
    "defaultOutputModes": ["text/plain"],
    "skills": [
        {
            "id": "forecast",
            "name": "Forecast",
            "description": "A city's weather.",
            "tags": ["weather"],
            "securityRequirements": [{"schemes": {"agentKey": {"list": []}}}],
        }
    ],
}


def card_path(agent_id: str) -> str:
    return f"/a2a/{agent_id}/.well-known/agent-card.json"


async def test_card_of_an_agent_without_one_is_synthesized_from_its_registration(
    client: Client, gateway_url: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "0.3")
    r = await client.call("GET", card_path(agent_id))
    assert r.status == 200, r.raw
    card = r.json()
    endpoint = f"{gateway_url}/a2a/{agent_id}"
    assert card["name"] == "weather"
    assert card["supportedInterfaces"] == [
        {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": endpoint, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        {"url": endpoint, "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
    ]
    assert (card["url"], card["preferredTransport"]) == (endpoint, "JSONRPC")
    assert card["protocolVersion"].startswith("0.3")
    assert card["capabilities"]["streaming"] is True
    assert card["capabilities"]["pushNotifications"] is True
    assert "127.0.0.1:9/" not in r.raw.decode()


async def test_stored_card_is_rewritten_to_the_gateway_without_agent_security_or_its_signatures(
    client: Client, gateway_url: str, db: asyncpg.Connection
) -> None:
    agent_id = await register(client, "http://10.0.0.7:9000/rpc", "1.0")
    await db.execute(
        "UPDATE a2a_agents SET card = $1 WHERE id = $2", AGENT_CARD, uuid.UUID(agent_id)
    )
    card = (await client.call("GET", card_path(agent_id))).json()
    text = msgspec.json.encode(card).decode()
    assert "10.0.0.7" not in text and "agentKey" not in text
    # The agent's own signature no longer matches; only the gateway's are served (SPEC §18).
    assert AGENT_CARD["signatures"][0] not in card["signatures"]
    assert (card["name"], card["description"], card["version"]) == (
        "Forecaster",
        "Gives the weather.",
        "2.3.0",
    )
    assert card["defaultInputModes"] == ["text/plain", "application/json"]
    assert card["skills"] == [
        {
            "id": "forecast",
            "name": "Forecast",
            "description": "A city's weather.",
            "tags": ["weather"],
        }
    ]
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": True,
        "extensions": [],
        "extendedAgentCard": False,
    }
    assert {i["url"] for i in card["supportedInterfaces"]} == {f"{gateway_url}/a2a/{agent_id}"}


BEARER = {"scheme": "bearer", "bearerFormat": "JWT", "description": "A bearer JWT of the gateway"}


async def test_card_asked_for_in_1_0_carries_the_1_0_shapes_only(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await client.call("GET", card_path(agent_id), headers={"A2A-Version": "1.0"})
    card = r.json()
    assert card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": BEARER}}
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
    for member in ("url", "preferredTransport", "protocolVersion", "additionalInterfaces"):
        assert member not in card
    assert "security" not in card
    assert [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]] == [
        ("JSONRPC", "1.0"),
        ("HTTP+JSON", "1.0"),
        ("JSONRPC", "0.3"),
        ("HTTP+JSON", "0.3"),
    ]
    parsed = parse_agent_card(copy.deepcopy(card))
    assert parsed.security_schemes["bearer"].http_auth_security_scheme.bearer_format == "JWT"


async def test_card_asked_for_in_0_3_carries_the_0_3_shapes_only(
    client: Client, gateway_url: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await client.call("GET", card_path(agent_id) + "?A2A-Version=0.3")
    card = r.json()
    assert card["securitySchemes"] == {"bearer": {"type": "http", **BEARER}}
    assert card["security"] == [{"bearer": []}]
    assert "supportedInterfaces" not in card and "securityRequirements" not in card
    endpoint = f"{gateway_url}/a2a/{agent_id}"
    assert (card["url"], card["preferredTransport"]) == (endpoint, "JSONRPC")
    assert card["additionalInterfaces"] == [
        {"url": endpoint, "transport": "JSONRPC"},
        {"url": endpoint, "transport": "HTTP+JSON"},
    ]
    legacy = v03.AgentCard.model_validate(card)
    assert legacy.security_schemes["bearer"].root.scheme == "bearer"


async def test_card_asked_for_in_no_version_has_one_scheme_shape_both_versions_read(
    client: Client,
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    card = (await client.call("GET", card_path(agent_id))).json()
    assert card["securitySchemes"] == {"bearer": {"type": "http", **BEARER}}
    assert card["security"] == [{"bearer": []}]
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]


async def test_card_parses_as_a_1_0_card_and_as_a_0_3_card(
    client: Client, gateway_url: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    raw = (await client.call("GET", card_path(agent_id))).json()

    v10 = parse_agent_card(copy.deepcopy(raw))  # it rewrites the dict it reads
    assert [i.protocol_version for i in v10.supported_interfaces] == ["1.0", "1.0", "0.3", "0.3"]
    assert v10.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
    assert v10.capabilities.streaming is True

    legacy = v03.AgentCard.model_validate(raw)
    assert legacy.url == f"{gateway_url}/a2a/{agent_id}"
    assert legacy.preferred_transport == "JSONRPC"
    assert legacy.capabilities.streaming is True
    scheme = legacy.security_schemes["bearer"].root
    assert isinstance(scheme, v03.HTTPAuthSecurityScheme) and scheme.scheme == "bearer"


@pytest.fixture
async def public_gateway(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[str]:
    configured = msgspec.structs.replace(settings, public_url="https://agents.example.com/")
    async with serve_asgi(create_app(configured)) as base:
        yield base


async def test_card_urls_use_the_configured_public_url(public_gateway: str) -> None:
    async with aiohttp.ClientSession() as session:
        client = Client(public_gateway, session)
        agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
        card = (await client.call("GET", card_path(agent_id))).json()
    endpoint = f"https://agents.example.com/a2a/{agent_id}"
    assert card["url"] == endpoint
    assert {i["url"] for i in card["supportedInterfaces"]} == {endpoint}


async def test_card_of_a_public_agent_is_served_without_a_token(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0", visibility="public")
    r = await client.call("GET", card_path(agent_id), bearer=None)
    assert r.status == 200, r.raw
    assert r.json()["securitySchemes"]["bearer"]["scheme"] == "bearer"


async def test_card_of_any_other_agent_needs_a_token_whether_it_exists_or_not(
    client: Client,
) -> None:
    private = await register(client, "http://127.0.0.1:9/", "1.0")
    for agent_id in (private, str(uuid.uuid4())):
        r = await client.call("GET", card_path(agent_id), bearer=None)
        assert (r.status, r.headers["content-type"]) == (401, "application/problem+json")
        assert agent_id not in r.raw.decode()


async def test_card_with_a_bad_token_is_refused_even_for_a_public_agent(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0", visibility="public")
    r = await client.call("GET", card_path(agent_id), bearer="not-a-jwt")
    assert r.status == 401


async def test_card_needs_the_read_permission(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0", visibility="public")
    r = await client.call("GET", card_path(agent_id), bearer=token(perms=["a2a.invoke"]))
    assert (r.status, r.headers["content-type"]) == (403, "application/problem+json")
    assert "a2a.read" in r.json()["detail"]


async def test_card_of_an_invisible_agent_is_not_found(client: Client) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await client.call("GET", card_path(agent_id), bearer=token("bob@example.com"))
    assert r.status == 404
    unknown = await client.call("GET", card_path(str(uuid.uuid4())))
    assert unknown.status == 404


V03_CARD = {
    "name": "Old forecaster",
    "description": "A 0.3 agent.",
    "version": "0.9.0",
    "protocolVersion": "0.3.0",
    "url": "http://10.0.0.8:9000/",
    "preferredTransport": "JSONRPC",
    "additionalInterfaces": [{"url": "http://10.0.0.8:9000/", "transport": "JSONRPC"}],
    "capabilities": {"streaming": True},
    "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Key"}},
    "security": [{"key": []}],
    "supportsAuthenticatedExtendedCard": True,
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "s", "name": "S", "description": "d", "tags": [], "security": [{"key": []}]}],
}


async def test_stored_0_3_card_is_rewritten_to_the_gateway(
    client: Client, gateway_url: str, db: asyncpg.Connection
) -> None:
    agent_id = await register(client, "http://10.0.0.8:9000/", "0.3")
    await db.execute("UPDATE a2a_agents SET card = $1 WHERE id = $2", V03_CARD, uuid.UUID(agent_id))
    card = (await client.call("GET", card_path(agent_id))).json()
    text = msgspec.json.encode(card).decode()
    assert "10.0.0.8" not in text and "X-Key" not in text
    assert card["supportsAuthenticatedExtendedCard"] is True  # served through the gateway
    assert card["url"] == f"{gateway_url}/a2a/{agent_id}"
    assert card["additionalInterfaces"] == [
        {"url": card["url"], "transport": "JSONRPC"},
        {"url": card["url"], "transport": "HTTP+JSON"},
    ]
    assert card["skills"] == [{"id": "s", "name": "S", "description": "d", "tags": []}]
    assert [i["protocolVersion"] for i in card["supportedInterfaces"]] == [
        "1.0",
        "1.0",
        "0.3",
        "0.3",
    ]
    assert card["security"] == [{"bearer": []}]
