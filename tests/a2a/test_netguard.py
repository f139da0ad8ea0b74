"""Where agents may live: URL schemes and ports, refused addresses at registration, PATCH
and call time. No test sends traffic outside 127.0.0.0/8: refusals are checked at
registration or at resolution, before any connection is attempted, and the connectors' sockets
are recorded and opened to loopback only."""

# ruff: noqa: RUF001  (hosts spelled with characters that look like ASCII digits)

from __future__ import annotations

import ast
import ipaddress
import socket
import uuid
from pathlib import Path

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

import a2a_continue
from a2a_continue.a2a.downstream import AgentAddressRefused, AgentTarget, post_rpc
from a2a_continue.a2a.netguard import (
    AddressRefused,
    GuardedResolver,
    literal_address,
)
from a2a_continue.app import create_app
from a2a_continue.settings import Settings, parse_networks
from tests.support.client import Client, assert_problem, register
from tests.support.database import counts
from tests.support.fakes import JSON, Scripted, StartFake
from tests.support.servers import serve_asgi
from tests.support.sockets import Sockets
from tests.support.spellings import FULLWIDTH_LOOPBACK, STORED_SPELLINGS

REFUSED_HOSTS = {
    "metadata": "169.254.169.254",
    "decimal": "2852039166",
    "octal": "0251.0376.0251.0376",
    "hex": "0xa9fea9fe",
    "short": "169.254.43518",
    "link-local-v6": "[fe80::1]",
    "mapped-v6": "[::ffff:169.254.169.254]",
    "mapped-v6-hex": "[::ffff:a9fe:a9fe]",
    "unspecified": "0.0.0.0",
    "unspecified-short": "0",
    "unspecified-v6": "[::]",
    "multicast": "224.0.0.1",
    "multicast-v6": "[ff02::1]",
    "broadcast": "255.255.255.255",
    "circled-unspecified": "⓪.⓪.⓪.⓪",
    "circled-metadata": "①⑥⑨.②⑤④.①⑥⑨.②⑤④",
    "fullwidth-metadata": "１６９．２５４．１６９．２５４",
    "ideographic-dots": "169。254。169。254",
    "fullwidth-hex": "０ｘａ９ｆｅａ９ｆｅ",
    "nat64": "[64:ff9b::a9fe:a9fe]",
    "nat64-local": "[64:ff9b:1::a9fe:a9fe]",
    "6to4": "[2002:a9fe:a9fe::]",
    "ipv4-compatible": "[::169.254.169.254]",
    "teredo": "[2001:0:a9fe:a9fe::]",
    "aws-metadata-v6": "[fd00:ec2::254]",
}
ALLOWED_HOSTS = ["127.0.0.1", "127.1", "localhost", "10.1.2.3", "192.168.0.7", "[::1]", "agent"]


def agent_body(url: str) -> JSON:
    return {"name": "n", "endpointUrl": url, "protocolVersion": "1.0"}


# ---- schemes and ports --------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["HTTP", "Http", "HTTPS"])
async def test_scheme_in_any_case_is_stored_in_lower_case(client: Client, scheme: str) -> None:
    r = await client.call("POST", "/v1/a2a/agents", agent_body(f"{scheme}://127.0.0.1:9/a"))
    assert r.status == 201, r.raw
    assert r.json()["endpointUrl"] == f"{scheme.lower()}://127.0.0.1:9/a"
    r = await client.call(
        "PATCH", f"/v1/a2a/agents/{r.json()['id']}", {"endpointUrl": f"{scheme}://127.0.0.1:8/"}
    )
    assert r.status == 200, r.raw
    assert r.json()["endpointUrl"] == f"{scheme.lower()}://127.0.0.1:8/"


async def test_the_schema_accepts_a_scheme_in_any_case(db: asyncpg.Connection) -> None:
    await db.execute(
        "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner)"
        " VALUES ($1, 'n', 'HTTP://127.0.0.1:9/', '1.0', 'alice@example.com')",
        uuid.uuid4(),
    )


@pytest.mark.parametrize("port", ["0", "65536", "99999999999"])
async def test_port_outside_1_to_65535_is_422(
    client: Client, db: asyncpg.Connection, port: str
) -> None:
    url = f"http://127.0.0.1:{port}/"
    r = await client.call("POST", "/v1/a2a/agents", agent_body(url))
    assert "port" in assert_problem(r, 422)["detail"]
    agent = await register(client, "http://127.0.0.1:9/")
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent}", {"endpointUrl": url})
    assert_problem(r, 422)
    assert await db.fetchval("SELECT endpoint_url FROM a2a_agents") == "http://127.0.0.1:9/"


@pytest.mark.parametrize(
    "url", ["http://[::1", "http://[zz]/", "http://a b/", "http://x/\t", "http://[::1]:99999/"]
)
async def test_urls_that_do_not_parse_are_422_on_registration_and_patch(
    client: Client, db: asyncpg.Connection, url: str
) -> None:
    r = await client.call("POST", "/v1/a2a/agents", agent_body(url))
    assert_problem(r, 422)
    agent = await register(client, "http://127.0.0.1:9/")
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent}", {"endpointUrl": url})
    assert_problem(r, 422)
    assert await db.fetchval("SELECT endpoint_url FROM a2a_agents") == "http://127.0.0.1:9/"


# ---- refused addresses at registration ----------------------------------------------------


@pytest.mark.parametrize("host", sorted(REFUSED_HOSTS))
async def test_registration_refuses_guarded_addresses_in_every_spelling(
    client: Client, db: asyncpg.Connection, host: str
) -> None:
    url = f"http://{REFUSED_HOSTS[host]}:8080/"
    r = await client.call("POST", "/v1/a2a/agents", agent_body(url))
    assert "address" in assert_problem(r, 422)["detail"]
    assert await counts(db) == (0, 0, 0)


@pytest.mark.parametrize("host", sorted(REFUSED_HOSTS))
async def test_patch_refuses_guarded_addresses_in_every_spelling(
    client: Client, db: asyncpg.Connection, host: str
) -> None:
    agent = await register(client, "http://127.0.0.1:9/")
    url = f"http://{REFUSED_HOSTS[host]}/"
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent}", {"endpointUrl": url})
    assert_problem(r, 422)
    assert await db.fetchval("SELECT endpoint_url FROM a2a_agents") == "http://127.0.0.1:9/"


@pytest.mark.parametrize("host", ALLOWED_HOSTS)
async def test_loopback_private_and_names_stay_allowed_by_default(
    client: Client, host: str
) -> None:
    r = await client.call("POST", "/v1/a2a/agents", agent_body(f"http://{host}:9/"))
    assert r.status == 201, r.raw


async def test_agent_networks_restrict_registration_to_the_allow_list(
    settings: Settings, db: asyncpg.Connection
) -> None:
    only = msgspec.structs.replace(settings, agent_networks=parse_networks("127.0.0.0/8, ::1/128"))
    async with serve_asgi(create_app(only)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        for host in ["127.0.0.1", "[::1]"]:
            r = await client.call("POST", "/v1/a2a/agents", agent_body(f"http://{host}:9/"))
            assert r.status == 201, r.raw
        for host in ["10.1.2.3", "192.168.0.7", "[fd00::1]"]:
            r = await client.call("POST", "/v1/a2a/agents", agent_body(f"http://{host}:9/"))
            assert "A2AC_AGENT_NETWORKS" in assert_problem(r, 422)["detail"]
    assert (await counts(db))[0] == 2


@pytest.mark.parametrize("host", [FULLWIDTH_LOOPBACK, "①②⑦.⓪.⓪.①", "[::ffff:127.0.0.1]"])
async def test_agent_networks_judge_a_unicode_or_mapped_loopback_as_loopback(
    settings: Settings, db: asyncpg.Connection, host: str
) -> None:
    elsewhere = msgspec.structs.replace(settings, agent_networks=parse_networks("10.0.0.0/8"))
    async with serve_asgi(create_app(elsewhere)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        r = await client.call("POST", "/v1/a2a/agents", agent_body(f"http://{host}:9/"))
        detail = assert_problem(r, 422)["detail"]
        assert "127.0.0.1 is outside A2AC_AGENT_NETWORKS" in detail
        agent = await register(client, "http://10.1.2.3:9/")
        r = await client.call(
            "PATCH", f"/v1/a2a/agents/{agent}", {"endpointUrl": f"http://{host}/"}
        )
        assert "A2AC_AGENT_NETWORKS" in assert_problem(r, 422)["detail"]
    assert await db.fetchval("SELECT endpoint_url FROM a2a_agents") == "http://10.1.2.3:9/"


def test_literal_address_reads_every_ipv4_spelling() -> None:
    expected = ipaddress.ip_address("169.254.169.254")
    for spelling in ["169.254.169.254", "2852039166", "0251.0376.0251.0376", "0xA9FEA9FE"]:
        assert literal_address(spelling) == expected
    assert literal_address("agent.example") is None
    assert literal_address("1.2.3.4.5") is None


# ---- call time ----------------------------------------------------------------------------


def test_every_outbound_session_of_the_gateway_is_built_on_the_guarded_connector() -> None:
    # Only the guard makes connectors, and no session goes without one (aiohttp's default is
    # unguarded). The operator tools under ops/ call the gateway itself, not agents.
    package = Path(a2a_continue.__file__).parent
    unguarded = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "ops":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            given = {keyword.arg for keyword in node.keywords}
            if (name == "TCPConnector" and path.name != "netguard.py") or (
                name == "ClientSession" and "connector" not in given
            ):
                unguarded.append(f"{path.relative_to(package)}:{node.lineno} {name}")
    assert unguarded == []


class FixedResolver(AbstractResolver):
    """Resolves every name to the addresses given (a hosts file, without DNS)."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self.table[host]
        ]

    async def close(self) -> None:
        return None


HOSTS = {
    "agent.test": ["127.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "mapped.test": ["::ffff:169.254.169.254"],
    "split.test": ["169.254.169.254", "127.0.0.1"],
    "private.test": ["10.9.8.7"],
}


@pytest.mark.parametrize("host", ["metadata.test", "mapped.test"])
async def test_resolver_refuses_a_name_that_resolves_to_a_guarded_address(host: str) -> None:
    resolver = GuardedResolver(inner=FixedResolver(HOSTS))
    with pytest.raises(AddressRefused):
        await resolver.resolve(host, 80)


async def test_resolver_keeps_only_the_allowed_addresses_of_a_name() -> None:
    resolver = GuardedResolver(inner=FixedResolver(HOSTS))
    assert [r["host"] for r in await resolver.resolve("split.test", 80)] == ["127.0.0.1"]


async def test_resolver_applies_the_allow_list() -> None:
    resolver = GuardedResolver(parse_networks("127.0.0.0/8"), FixedResolver(HOSTS))
    with pytest.raises(AddressRefused):
        await resolver.resolve("private.test", 80)
    assert len(await resolver.resolve("agent.test", 80)) == 1


async def post_through(url: str, resolver: AbstractResolver) -> JSON:
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(inner=resolver))
    async with aiohttp.ClientSession(connector=connector) as session:
        target = AgentTarget(endpoint_url=url, protocol_version="1.0", timeout_s=5)
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
        payload = {
            "jsonrpc": "2.0",
            "id": "1",
            "method": "SendMessage",
            "params": {"message": message},
        }
        reply = await post_rpc(session, target, payload, 1 << 20)
        body: JSON = reply.body
        return body


async def test_a_call_to_a_name_resolving_to_a_guarded_address_is_refused_before_connecting(
    fake_agent: StartFake,
) -> None:
    fake = await fake_agent(Scripted())
    port = fake.url.rsplit(":", 1)[1].rstrip("/")
    answered = await post_through(f"http://agent.test:{port}/", FixedResolver(HOSTS))
    assert answered["jsonrpc"] == "2.0"
    with pytest.raises(AgentAddressRefused):
        await post_through(f"http://metadata.test:{port}/", FixedResolver(HOSTS))
    assert len(fake.received) == 1


async def test_a_stored_literal_guarded_address_is_refused_at_call_time(
    client: Client, db: asyncpg.Connection
) -> None:
    agent = await register(client, "http://127.0.0.1:9/")
    # A row written before the guard existed (or by hand): the call refuses it anyway.
    await db.execute("UPDATE a2a_agents SET endpoint_url = 'http://0xa9fea9fe:80/'")
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert assert_problem(r, 502)["type"].endswith(":agent-address-refused")


def refuse_any_connection() -> aiohttp.TraceConfig:
    """A trace that fails the test before any connection could be opened."""

    async def opening(*args: object) -> None:
        raise AssertionError("the guard let a connection to a refused address start")

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(opening)
    return trace


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/", "http://[::ffff:a9fe:a9fe]/", "http://[fe80::1]:8080/"]
)
async def test_a_literal_guarded_address_is_refused_at_call_time_before_connecting(
    url: str,
) -> None:
    async with aiohttp.ClientSession(trace_configs=[refuse_any_connection()]) as session:
        target = AgentTarget(endpoint_url=url, protocol_version="1.0", timeout_s=5)
        payload = {"jsonrpc": "2.0", "id": "1", "method": "SendMessage", "params": {}}
        with pytest.raises(AgentAddressRefused):
            await post_rpc(session, target, payload, 1 << 20)


async def test_redirects_from_an_agent_are_not_followed(
    client: Client, fake_agent: StartFake
) -> None:
    elsewhere = await fake_agent(Scripted())

    async def redirect(request: JSON) -> web.Response:
        return web.Response(status=307, headers={"Location": elsewhere.url})

    agent = await register(client, (await fake_agent(redirect)).url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert_problem(r, 502)
    assert elsewhere.received == []


@pytest.mark.parametrize("host", [*STORED_SPELLINGS, "[fd00:ec2::254]"])
@pytest.mark.parametrize("streaming", [False, True])
async def test_a_stored_endpoint_spelling_a_refused_address_is_never_connected_to(
    client: Client,
    db: asyncpg.Connection,
    fake_agent: StartFake,
    sockets: Sockets,
    host: str,
    streaming: bool,
) -> None:
    fake = await fake_agent(Scripted())
    agent = await register(client, fake.url, capabilities={"streaming": streaming})
    port = int(fake.url.rstrip("/").rsplit(":", 1)[1])
    # A row written past the guard, at the fake agent's own port: 0.0.0.0 would reach it.
    await db.execute("UPDATE a2a_agents SET endpoint_url = $1", f"http://{host}:{port}/")
    headers = {"Accept": "text/event-stream"} if streaming else {}
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"}, headers=headers)
    problem = assert_problem(r, 502)
    assert problem["type"].endswith(":agent-address-refused")
    assert "address is refused" in problem["detail"]
    assert fake.received == [] and sockets.to_port(port) == []


@pytest.mark.parametrize("streaming", [False, True])
async def test_every_outbound_call_refuses_a_stored_literal_guarded_address(
    client: Client, db: asyncpg.Connection, streaming: bool
) -> None:
    agent = await register(client, "http://127.0.0.1:9/", capabilities={"streaming": streaming})
    # 0.0.0.0 is refused yet would only ever reach this machine, were the guard missing.
    await db.execute("UPDATE a2a_agents SET endpoint_url = 'http://0.0.0.0:9/'")
    headers = {"Accept": "text/event-stream"} if streaming else {}
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"}, headers=headers)
    assert assert_problem(r, 502)["type"].endswith(":agent-address-refused")
