"""Registering an agent from its agent card (cardUrl), and capabilities on every agent."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web

from a2a_continue.app import create_app
from a2a_continue.core.agents.cards import MAX_CARD_BYTES, card_location, pick_interface
from a2a_continue.ops.sample_agent import start_sample_agent
from a2a_continue.ops.sample_card import sample_card
from a2a_continue.settings import Settings, parse_networks
from tests.support.client import Client, register, token
from tests.support.ports import dead_url
from tests.support.sdk_agent import run_sdk_agent
from tests.support.servers import serve_aiohttp, serve_asgi
from tests.support.sockets import Sockets
from tests.support.spellings import FULLWIDTH_LOOPBACK, STORED_SPELLINGS

JSON = dict[str, Any]
CARD = "/.well-known/agent-card.json"
CardHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def card_server() -> AsyncIterator[Callable[[CardHandler], Awaitable[str]]]:
    """Serve a scripted card at the well-known path; yield a starter returning the base URL."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(handler: CardHandler) -> str:
            app = web.Application()
            app.router.add_get(CARD, handler)
            base: str = await stack.enter_async_context(serve_aiohttp(app))
            return base

        yield start


def serving(card: Any) -> CardHandler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(card)

    return handler


async def register_card(client: Client, card_url: str, **extra: Any) -> Any:
    return await client.call("POST", "/v1/a2a/agents", {"cardUrl": card_url, **extra})


def card_error(r: Any) -> str:
    assert r.status == 422, r.raw
    body = r.json()
    assert body["errors"][0]["loc"] == "$.cardUrl"
    msg: str = body["errors"][0]["msg"]
    return msg


async def agent_count(db: asyncpg.Connection) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM a2a_agents")
    return count


async def test_card_url_of_a_1_0_sdk_agent_registers_its_json_rpc_interface(
    client: Client,
) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        r = await register_card(client, agent.url)
        assert r.status == 201, r.raw
        registered = r.json()
        assert registered["endpointUrl"] == agent.url
        assert registered["protocolVersion"] == "1.0"
        assert registered["name"] == "SDK weather agent"
        assert registered["capabilities"] == {"streaming": False, "pushNotifications": False}
        async with client.session.get(agent.url.rstrip("/") + CARD) as published:
            assert registered["card"] == await published.json()
        start = await client.call(
            "POST", f"/v1/a2a/{registered['id']}/messages", {"text": "weather?"}
        )
        assert start.status == 200, start.raw
        assert start.headers["A2A-Task-State"] == "input-required"
        assert agent.headers[-1]["a2a-version"] == "1.0"


async def test_card_url_of_a_0_3_sdk_agent_registers_its_url(client: Client) -> None:
    async with run_sdk_agent(card="0.3") as agent:
        r = await register_card(client, agent.url.rstrip("/") + CARD)
        assert r.status == 201, r.raw
        registered = r.json()
        assert registered["endpointUrl"] == agent.url
        assert registered["protocolVersion"] == "0.3"
        assert registered["card"]["preferredTransport"] == "JSONRPC"
        assert "supportedInterfaces" not in registered["card"]
        start = await client.call(
            "POST", f"/v1/a2a/{registered['id']}/messages", {"text": "weather?"}
        )
        assert start.status == 200, start.raw
        assert start.json()["result"]["kind"] == "task"
        assert start.headers["A2A-Task-State"] == "input-required"


async def test_a_streaming_sdk_agent_is_registered_as_streaming(client: Client) -> None:
    async with run_sdk_agent(streaming=True, card="1.0") as agent:
        r = await register_card(client, agent.url)
    assert r.status == 201, r.raw
    assert r.json()["capabilities"] == {"streaming": True, "pushNotifications": False}


async def test_card_registration_is_returned_on_read_and_list(client: Client) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        registered = (await register_card(client, agent.url)).json()
    read = (await client.call("GET", f"/v1/a2a/agents/{registered['id']}")).json()
    assert read["card"] == registered["card"]
    assert read["capabilities"] == registered["capabilities"]
    listed = (await client.call("GET", "/v1/a2a/agents")).json()["agents"]
    assert listed[0]["card"] == registered["card"]


async def test_a_given_name_wins_over_the_cards(client: Client) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        r = await register_card(client, agent.url, name="my forecaster", visibility="public")
    assert r.status == 201, r.raw
    assert r.json()["name"] == "my forecaster"
    assert r.json()["visibility"] == "public"


async def test_card_capabilities_are_recorded(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    card = sample_card("http://127.0.0.1:9/", "1.0")
    card["capabilities"] = {"streaming": True, "pushNotifications": True, "extensions": []}
    base = await card_server(serving(card))
    r = await register_card(client, base)
    assert r.status == 201, r.raw
    assert r.json()["capabilities"] == {"streaming": True, "pushNotifications": True}
    assert r.json()["card"] == card


async def test_supported_interfaces_1_0_are_preferred_over_0_3(client: Client) -> None:
    runner, endpoint = await start_sample_agent()
    try:
        r = await register_card(client, endpoint)
    finally:
        await runner.cleanup()
    assert r.status == 201, r.raw
    assert r.json()["protocolVersion"] == "1.0"
    assert [i["protocolVersion"] for i in r.json()["card"]["supportedInterfaces"]] == [
        "1.0",
        "0.3",
    ]


async def test_a_pure_0_3_card_of_the_sample_agent_registers_0_3(client: Client) -> None:
    runner, endpoint = await start_sample_agent(protocol="0.3")
    try:
        r = await register_card(client, endpoint)
        assert r.status == 201, r.raw
        assert (r.json()["endpointUrl"], r.json()["protocolVersion"]) == (endpoint, "0.3")
        start = await client.call("POST", f"/v1/a2a/{r.json()['id']}/messages", {"text": "hi"})
        assert start.headers["A2A-Task-State"] == "input-required"
    finally:
        await runner.cleanup()


def test_only_json_rpc_interfaces_are_picked() -> None:
    card = {
        "supportedInterfaces": [
            {"url": "http://a/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "http://a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://a/rpc03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ]
    }
    assert pick_interface(card, "http://a" + CARD) == ("http://a/rpc03", "0.3")


def test_a_0_3_card_falls_back_to_its_additional_json_rpc_interface() -> None:
    card = {
        "url": "http://a/grpc",
        "preferredTransport": "GRPC",
        "additionalInterfaces": [
            {"url": "http://a/grpc", "transport": "GRPC"},
            {"url": "http://a/rpc", "transport": "JSONRPC"},
        ],
    }
    assert pick_interface(card, "http://a" + CARD) == ("http://a/rpc", "0.3")


def test_a_0_3_card_without_preferred_transport_means_json_rpc() -> None:
    assert pick_interface({"url": "http://a/rpc"}, "http://a" + CARD) == ("http://a/rpc", "0.3")


def test_an_interface_of_an_unknown_version_is_not_picked() -> None:
    card = {
        "supportedInterfaces": [
            {"url": "http://a/", "protocolBinding": "JSONRPC", "protocolVersion": "2.0"}
        ]
    }
    assert pick_interface(card, "http://a" + CARD) is None


@pytest.mark.parametrize(
    ("given", "fetched"),
    [
        ("http://a:1", "http://a:1/.well-known/agent-card.json"),
        ("http://a:1/", "http://a:1/.well-known/agent-card.json"),
        ("http://a/agents/x/", "http://a/agents/x/.well-known/agent-card.json"),
        ("http://a/.well-known/agent.json", "http://a/.well-known/agent.json"),
        ("https://a/cards/weather.json", "https://a/cards/weather.json"),
    ],
)
def test_a_base_url_gets_the_well_known_card_path(given: str, fetched: str) -> None:
    assert card_location(given) == fetched


async def test_the_card_is_fetched_with_the_given_auth(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    async def guarded(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != "Bearer agent-secret":
            return web.Response(status=401)
        return web.json_response(sample_card("http://127.0.0.1:9/"))

    base = await card_server(guarded)
    without = await register_card(client, base)
    assert "answered HTTP 401" in card_error(without)
    r = await register_card(client, base, auth={"type": "bearer", "token": "agent-secret"})
    assert r.status == 201, r.raw
    assert r.json()["authType"] == "bearer"
    assert "agent-secret" not in r.raw.decode()


async def test_an_unreachable_card_is_422(client: Client, db: asyncpg.Connection) -> None:
    msg = card_error(await register_card(client, dead_url()))
    assert msg.startswith("the agent card could not be fetched from http://127.0.0.1:")
    assert "connection failed" in msg
    assert await agent_count(db) == 0


async def test_a_card_answering_404_is_422(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    base = await card_server(serving({}))
    msg = card_error(await register_card(client, base + "/elsewhere.json"))
    assert msg.endswith("it answered HTTP 404")


async def test_a_card_that_is_not_json_is_422(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]], db: asyncpg.Connection
) -> None:
    async def html(request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>hello</html>", content_type="text/html")

    base = await card_server(html)
    assert (
        card_error(await register_card(client, base))
        == f"the agent card at {base}{CARD} is not JSON"
    )
    assert await agent_count(db) == 0


async def test_a_card_that_is_not_an_object_is_422(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    base = await card_server(serving(["a", "list"]))
    assert card_error(await register_card(client, base)).endswith("is not a JSON object")


async def test_a_card_without_a_json_rpc_interface_is_422(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]], db: asyncpg.Connection
) -> None:
    card = sample_card("http://127.0.0.1:9/")
    card["supportedInterfaces"] = [
        {"url": "http://127.0.0.1:9/", "protocolBinding": "GRPC", "protocolVersion": "1.0"}
    ]
    base = await card_server(serving(card))
    msg = card_error(await register_card(client, base))
    assert msg == f"the agent card at {base}{CARD} offers no JSON-RPC interface (A2A 1.0 or 0.3)"
    assert await agent_count(db) == 0


async def test_a_card_larger_than_the_cap_is_422(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    card = sample_card("http://127.0.0.1:9/")
    card["description"] = "x" * MAX_CARD_BYTES
    base = await card_server(serving(card))
    assert card_error(await register_card(client, base)).endswith(
        f"it is larger than {MAX_CARD_BYTES} bytes"
    )


async def test_a_card_that_does_not_come_in_time_is_422(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    never = asyncio.Event()

    async def stalled(request: web.Request) -> web.StreamResponse:
        await never.wait()
        return web.Response()

    base = await card_server(stalled)
    try:
        msg = card_error(await register_card(client, base, timeoutSeconds=0.2))
    finally:
        never.set()
    assert msg.endswith("no answer within 0.2 s")


async def test_a_card_without_a_name_needs_one_in_the_body(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    card = sample_card("http://127.0.0.1:9/")
    del card["name"]
    base = await card_server(serving(card))
    r = await register_card(client, base)
    assert r.status == 422
    assert r.json()["errors"] == [
        {"loc": "$.name", "msg": "the agent card names no agent; give a name"}
    ]
    assert (await register_card(client, base, name="named")).status == 201


async def test_card_url_with_endpoint_url_is_422(client: Client) -> None:
    r = await register_card(
        client, "http://127.0.0.1:9/", endpointUrl="http://127.0.0.1:9/", protocolVersion="1.0"
    )
    assert r.status == 422
    assert [e["loc"] for e in r.json()["errors"]] == ["$.endpointUrl", "$.protocolVersion"]


async def test_without_card_url_name_endpoint_and_version_are_required(client: Client) -> None:
    r = await client.call("POST", "/v1/a2a/agents", {"endpointUrl": "http://127.0.0.1:9/"})
    assert r.status == 422
    assert [e["loc"] for e in r.json()["errors"]] == ["$.name", "$.protocolVersion"]


async def test_a_hand_registration_gets_capabilities_from_the_body(client: Client) -> None:
    plain = await client.call(
        "GET", f"/v1/a2a/agents/{await register(client, 'http://127.0.0.1:9/')}"
    )
    assert plain.json()["capabilities"] == {"streaming": False, "pushNotifications": False}
    assert plain.json()["card"] is None
    agent_id = await register(client, "http://127.0.0.1:9/", capabilities={"streaming": True})
    streaming = await client.call("GET", f"/v1/a2a/agents/{agent_id}")
    assert streaming.json()["capabilities"] == {"streaming": True, "pushNotifications": False}


async def test_patch_with_card_url_refetches_the_card(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/old", version="0.3")
    card = sample_card("http://127.0.0.1:9/new", "1.0")
    card["capabilities"]["streaming"] = True
    base = await card_server(serving(card))
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent_id}", {"cardUrl": base})
    assert r.status == 200, r.raw
    patched = r.json()
    assert (patched["endpointUrl"], patched["protocolVersion"]) == ("http://127.0.0.1:9/new", "1.0")
    assert patched["name"] == "Sample weather agent"
    assert patched["capabilities"] == {"streaming": True, "pushNotifications": False}
    assert patched["card"] == card


async def test_patch_with_card_url_uses_the_stored_credentials(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    async def guarded(request: web.Request) -> web.StreamResponse:
        if request.headers.get("X-Key") != "k1":
            return web.Response(status=403)
        return web.json_response(sample_card("http://127.0.0.1:9/"))

    base = await card_server(guarded)
    agent_id = await register(
        client, "http://127.0.0.1:9/", auth={"type": "headers", "headers": {"X-Key": "k1"}}
    )
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent_id}", {"cardUrl": base, "name": "n"})
    assert r.status == 200, r.raw
    assert r.json()["name"] == "n"
    assert r.json()["card"]["name"] == "Sample weather agent"


async def test_patch_with_a_bad_card_is_422_and_changes_nothing(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/")
    before = (await client.call("GET", f"/v1/a2a/agents/{agent_id}")).json()
    base = await card_server(serving({"name": "no interfaces", "url": 7}))
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent_id}", {"cardUrl": base})
    assert "offers no JSON-RPC interface" in card_error(r)
    assert (await client.call("GET", f"/v1/a2a/agents/{agent_id}")).json() == before


async def test_patch_with_card_url_by_someone_else_is_403_before_any_fetch(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    fetched: list[str] = []

    async def recording(request: web.Request) -> web.StreamResponse:
        fetched.append(request.path)
        return web.json_response(sample_card("http://127.0.0.1:9/"))

    base = await card_server(recording)
    agent_id = await register(client, "http://127.0.0.1:9/", visibility="public")
    bob = client.as_(token("bob@example.com"))
    r = await bob.call("PATCH", f"/v1/a2a/agents/{agent_id}", {"cardUrl": base})
    assert r.status == 403
    unknown = await client.call("PATCH", f"/v1/a2a/agents/{uuid.uuid4()}", {"cardUrl": base})
    assert unknown.status == 404
    assert fetched == []


async def test_a_hand_change_of_endpoint_drops_the_card(client: Client) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        agent_id = (await register_card(client, agent.url)).json()["id"]
    r = await client.call(
        "PATCH", f"/v1/a2a/agents/{agent_id}", {"endpointUrl": "http://127.0.0.1:9/moved"}
    )
    assert r.status == 200, r.raw
    assert r.json()["card"] is None
    renamed = await client.call("PATCH", f"/v1/a2a/agents/{agent_id}", {"name": "kept"})
    assert renamed.json()["card"] is None


async def test_a_rename_keeps_the_card(client: Client) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        agent_id = (await register_card(client, agent.url)).json()["id"]
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent_id}", {"name": "renamed"})
    assert r.json()["card"]["name"] == "SDK weather agent"


async def test_a_card_url_with_credentials_is_422(client: Client) -> None:
    msg = card_error(await register_card(client, "http://user:pw@127.0.0.1:9/"))
    assert msg == "must not carry credentials; put them in 'auth'"


async def test_the_facade_card_of_a_card_registered_agent_is_the_agents_own(
    client: Client,
) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        agent_id = (await register_card(client, agent.url)).json()["id"]
    r = await client.call("GET", f"/a2a/{agent_id}/.well-known/agent-card.json")
    assert r.status == 200, r.raw
    facade = r.json()
    assert facade["name"] == "SDK weather agent"
    assert facade["description"] == "Asks for a city, then gives a forecast."
    assert [skill["id"] for skill in facade["skills"]] == ["forecast"]
    assert all(agent.url not in str(i) for i in facade["supportedInterfaces"])


async def test_a_card_url_at_a_refused_address_is_422_without_a_connection(
    client: Client,
) -> None:
    r = await register_card(client, "http://169.254.169.254/latest/")
    msg = card_error(r)
    assert msg.startswith("the agent card could not be fetched from http://169.254.169.254/")
    assert "its address is refused (169.254.169.254 is link-local)" in msg


async def test_a_card_naming_a_refused_endpoint_is_422(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]]
) -> None:
    base = await card_server(serving(sample_card("http://169.254.169.254/", "1.0")))
    r = await register_card(client, base)
    assert r.status == 422, r.raw
    assert r.json()["errors"][0]["loc"] == "$.endpointUrl"
    assert "link-local" in r.json()["errors"][0]["msg"]


def not_json(fetched: list[str]) -> CardHandler:
    """A listener that records each fetch and answers something that is no card."""

    async def handler(request: web.Request) -> web.StreamResponse:
        fetched.append(request.path)
        return web.Response(text="<html>something answered</html>", content_type="text/html")

    return handler


@pytest.mark.parametrize("host", [*STORED_SPELLINGS, "①⑥⑨.②⑤④.①⑥⑨.②⑤④"])
async def test_a_card_url_spelling_a_refused_address_says_so_and_is_never_fetched(
    client: Client,
    card_server: Callable[[CardHandler], Awaitable[str]],
    db: asyncpg.Connection,
    sockets: Sockets,
    host: str,
) -> None:
    fetched: list[str] = []
    port = int((await card_server(not_json(fetched))).rsplit(":", 1)[1])
    url = f"http://{host}:{port}/"
    msg = card_error(await register_card(client, url))
    assert "its address is refused" in msg and "JSON" not in msg
    agent_id = await register(client, "http://127.0.0.1:9/")
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent_id}", {"cardUrl": url})
    assert "its address is refused" in card_error(r)
    assert fetched == [] and sockets.to_port(port) == []
    assert await agent_count(db) == 1


@pytest.mark.parametrize("host", [FULLWIDTH_LOOPBACK, "localhost"])
async def test_a_card_url_outside_agent_networks_says_refused_and_is_never_fetched(
    settings: Settings,
    db: asyncpg.Connection,
    card_server: Callable[[CardHandler], Awaitable[str]],
    sockets: Sockets,
    host: str,
) -> None:
    fetched: list[str] = []
    port = int((await card_server(not_json(fetched))).rsplit(":", 1)[1])
    elsewhere = msgspec.structs.replace(settings, agent_networks=parse_networks("10.0.0.0/8"))
    async with serve_asgi(create_app(elsewhere)) as base, aiohttp.ClientSession() as session:
        msg = card_error(await register_card(Client(base, session), f"http://{host}:{port}/"))
    assert "its address is refused" in msg and "A2AC_AGENT_NETWORKS" in msg
    assert "JSON" not in msg
    assert fetched == [] and sockets.to_port(port) == []


async def test_a_card_naming_an_endpoint_in_unicode_digits_is_judged_by_its_address(
    client: Client, card_server: Callable[[CardHandler], Awaitable[str]], db: asyncpg.Connection
) -> None:
    base = await card_server(serving(sample_card("http://①⑥⑨.②⑤④.①⑥⑨.②⑤④/", "1.0")))
    r = await register_card(client, base)
    assert r.status == 422, r.raw
    assert r.json()["errors"][0]["loc"] == "$.endpointUrl"
    assert "169.254.169.254 is link-local" in r.json()["errors"][0]["msg"]
    assert await agent_count(db) == 0
