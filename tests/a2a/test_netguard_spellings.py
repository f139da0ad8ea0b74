"""The address guard reads a host as the HTTP client connects to it: Unicode and fullwidth
digits, IPv6 forms that carry an IPv4 address, metadata addresses; and the guarded connector
opens no socket to a refused address whatever reached it. No socket is opened here to
anything but 127.0.0.1: the connector's addresses are recorded and refused."""

# ruff: noqa: RUF001  (the characters that look like ASCII digits and dots are the point)

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import AsyncIterator

import aiohttp
import idna
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2a_continue.a2a.netguard import (
    AddressRefused,
    GuardedResolver,
    address_problem,
    check_call_url,
    guarded_connector,
    literal_address,
    normalize_endpoint_url,
    refused_reason,
    url_host,
    url_problem,
)
from a2a_continue.errors import Invalid
from a2a_continue.settings import parse_networks
from tests.support.servers import serve_aiohttp
from tests.support.sockets import Sockets
from tests.support.spellings import FULLWIDTH_LOOPBACK, REFUSED_SPELLINGS

# Hosts that spell a refused address in a way the guard once read as a name, or did not
# refuse: the address each reaches, and the reason it is refused.
BYPASSES = {
    **REFUSED_SPELLINGS,
    "⑯⑨.②⑤④.⑯⑨.②⑤④": "169.254.169.254 is link-local",
    "１６９.２５４.１６９.２５４": "169.254.169.254 is link-local",
    "169。254。169。254": "169.254.169.254 is link-local",
    "𝟏𝟔𝟗.𝟐𝟓𝟒.𝟏𝟔𝟗.𝟐𝟓𝟒": "169.254.169.254 is link-local",
    "０ｘａ９ｆｅａ９ｆｅ": "169.254.169.254 is link-local",
    "２８５２０３９１６６": "169.254.169.254 is link-local",
    "²²⁴.⁰.⁰.¹": "224.0.0.1 is multicast",
    "[64:ff9b::169.254.169.254]": "NAT64 address of 169.254.169.254, which is link-local",
    "[64:ff9b::]": "NAT64 address of 0.0.0.0, which is unspecified",
    "[64:ff9b:1:a9fe:a9:fe00::]": "local-use NAT64 address of 169.254.169.254, which is link-local",
    "[2002:a9fe:a9fe:1::7]": "6to4 address of 169.254.169.254, which is link-local",
    "[::a9fe:a9fe]": "IPv4-compatible address of 169.254.169.254, which is link-local",
    "[::ffff:0:a9fe:a9fe]": "IPv4-translated address of 169.254.169.254, which is link-local",
    "[2001:0:a9fe:a9fe::]": "Teredo address of 169.254.169.254, which is link-local",
    "[::ffff:a9fe:a9fe]": "169.254.169.254 is link-local",
    "[fd20:ce::254]": "fd20:ce::254 is a cloud metadata address",
    "100.100.100.200": "100.100.100.200 is a cloud metadata address",
    "168.63.129.16": "168.63.129.16 is a cloud metadata address",
    "[fe80::a9fe:a9fe%25eth0]": "fe80::a9fe:a9fe is link-local",
}

# Every character IDNA/UTS-46 (which the HTTP client applies to hosts) maps to digits and
# dots, by what it maps to: fullwidth, circled, superscript, mathematical, outlined digits,
# ideographic and fullwidth full stops (a scan of all of Unicode finds them in these blocks).
_BLOCKS = [(0xB0, 0xC0), (0x2024, 0x2027), (0x2070, 0x20A0), (0x2460, 0x2500), (0x3000, 0x3040),
           (0x3250, 0x32C0), (0xFE10, 0xFE70), (0xFF00, 0xFFF0), (0x1CCF0, 0x1CCFA),
           (0x1D7CE, 0x1D800), (0x1F100, 0x1F110), (0x1FBF0, 0x1FBFA)]  # fmt: skip


def _uts46(c: str) -> str:
    try:
        return str(idna.uts46_remap(c, std3_rules=False))
    except idna.IDNAError:
        return ""


FOLDS = {
    c: folded
    for start, end in _BLOCKS
    for c in map(chr, range(start, end))
    if re.fullmatch(r"[0-9.]+", folded := _uts46(c))
}
FOLDS.update({c: c for c in "0123456789."})


def test_the_spellings_cover_every_digit_and_the_dot_several_ways() -> None:
    for ascii_char in "0123456789.":
        others = [c for c, folded in FOLDS.items() if folded == ascii_char and c != ascii_char]
        assert len(others) >= 3, ascii_char


@st.composite
def spelled(draw: st.DrawFn, text: str) -> str:
    """``text`` (digits and dots) with each run of it drawn from the characters that fold to it."""
    out, at = [], 0
    while at < len(text):
        options = sorted(c for c, folded in FOLDS.items() if text.startswith(folded, at))
        chosen = draw(st.sampled_from(options))
        out.append(chosen)
        at += len(FOLDS[chosen])
    return "".join(out)


@st.composite
def ipv4_spelled(draw: st.DrawFn) -> tuple[ipaddress.IPv4Address, str]:
    address = draw(
        st.one_of(
            st.ip_addresses(v=4),
            st.ip_addresses(network="169.254.0.0/16"),
            st.ip_addresses(network="127.0.0.0/8"),
            st.sampled_from([ipaddress.IPv4Address(a) for a in ("0.0.0.0", "255.255.255.255")]),
        )
    )
    assert isinstance(address, ipaddress.IPv4Address)
    return address, draw(spelled(str(address)))


ALLOW_LISTS = [(), parse_networks("10.0.0.0/8"), parse_networks("127.0.0.0/8, ::1/128")]
quick = settings(max_examples=200, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))  # fmt: skip


# ---- the decision -------------------------------------------------------------------------


@pytest.mark.parametrize("host", sorted(BYPASSES))
def test_a_host_spelling_a_refused_address_is_refused_at_creation_and_at_call_time(
    host: str,
) -> None:
    url = f"http://{host}:8080/hook"
    with pytest.raises(Invalid) as refused:
        normalize_endpoint_url(url)
    assert BYPASSES[host] in refused.value.detail
    with pytest.raises(AddressRefused, match=re.escape(BYPASSES[host])):
        check_call_url(url)


@pytest.mark.parametrize("host", sorted(BYPASSES))
def test_an_allow_list_never_lets_a_refused_address_through(host: str) -> None:
    everything = parse_networks("0.0.0.0/0, ::/0")
    assert BYPASSES[host] in (url_problem(f"http://{host}/", everything) or "")


def test_fullwidth_loopback_is_judged_as_loopback_by_the_allow_lists() -> None:
    url = f"http://{FULLWIDTH_LOOPBACK}:9/hook"
    assert url_problem(url) is None
    assert url_problem(url, parse_networks("127.0.0.0/8")) is None
    problem = url_problem(url, parse_networks("10.0.0.0/8"), "A2AC_PUSH_NETWORKS")
    assert problem == "127.0.0.1 is outside A2AC_PUSH_NETWORKS"
    with pytest.raises(Invalid, match="A2AC_PUSH_NETWORKS"):
        normalize_endpoint_url(url, parse_networks("10.0.0.0/8"), setting="A2AC_PUSH_NETWORKS")


@given(ipv4_spelled())
@quick
def test_an_ipv4_address_in_any_unicode_spelling_is_judged_as_the_address(
    case: tuple[ipaddress.IPv4Address, str],
) -> None:
    address, spelling = case
    assert url_host(f"http://{spelling}:80/") == address
    for networks in ALLOW_LISTS:
        assert url_problem(f"http://{spelling}/", networks) == address_problem(address, networks)


REFUSED_V4 = st.one_of(
    st.ip_addresses(network="169.254.0.0/16"),
    st.ip_addresses(network="224.0.0.0/4"),
    st.sampled_from(
        [ipaddress.IPv4Address(a) for a in ("255.255.255.255", "100.100.100.200", "168.63.129.16")]
    ),
)


def _carriers(v4: int, suffix: int) -> dict[str, int]:
    """Every IPv6 form that carries the IPv4 address ``v4`` (``suffix`` fills free bits)."""
    return {
        "NAT64": 0x64FF9B << 96 | v4,
        "local-use NAT64 /96": 0x64FF9B0001 << 80 | v4,
        "local-use NAT64 /48": 0x64FF9B0001 << 80 | (v4 >> 16) << 64 | (v4 & 0xFFFF) << 40,
        "6to4": 0x2002 << 112 | v4 << 80 | suffix & (1 << 80) - 1,
        "IPv4-compatible": v4,
        "IPv4-translated": 0xFFFF << 48 | v4,
        "IPv4-mapped": 0xFFFF << 32 | v4,
        "Teredo server": 0x20010000 << 96 | v4 << 64 | suffix & (1 << 64) - 1,
    }


@given(REFUSED_V4, st.integers(0, (1 << 80) - 1))
@quick
def test_every_ipv6_form_carrying_a_refused_ipv4_address_is_refused(
    v4: ipaddress.IPv4Address, suffix: int
) -> None:
    for form, carrier in _carriers(int(v4), suffix).items():
        address = ipaddress.IPv6Address(carrier)
        problem = url_problem(f"http://[{address}]/", parse_networks("::/0, 0.0.0.0/0"))
        assert problem is not None and str(v4) in problem, (form, address)


@given(st.ip_addresses(v=4).filter(lambda a: address_problem(a) is None))
@quick
def test_ipv6_forms_carrying_an_allowed_ipv4_address_stay_allowed(
    v4: ipaddress.IPv4Address,
) -> None:
    for form in ("NAT64", "local-use NAT64 /96", "6to4", "IPv4-translated", "IPv4-mapped"):
        address = ipaddress.IPv6Address(_carriers(int(v4), 0)[form])
        assert url_problem(f"http://[{address}]/") is None, (form, address)


@pytest.mark.parametrize("url", ["http://%31%32%37.0.0.1/", "http://a%2fb/", "http://a*b/"])
def test_a_host_that_is_neither_a_name_nor_an_address_is_refused(url: str) -> None:
    with pytest.raises(Invalid, match="neither a name nor an address"):
        normalize_endpoint_url(url)
    with pytest.raises(AddressRefused, match="cannot be read"):
        check_call_url(url)


@pytest.mark.parametrize("host", ["агент.рф", "٠.٠.٠.٠", "Agent.Example", "my_agent", "[::1]"])
def test_names_and_ipv6_loopback_stay_allowed(host: str) -> None:
    assert normalize_endpoint_url(f"http://{host}:9/") == f"http://{host}:9/"


# ---- the guard reads hosts as the connector does ------------------------------------------


class NoDns(AbstractResolver):
    """Records every name the connector asks for; resolves none."""

    def __init__(self) -> None:
        self.names: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.names.append(host)
        raise OSError("the tests resolve no names")

    async def close(self) -> None:
        return None


async def reached(url: str) -> tuple[list[str], list[str]]:
    """The names a plain connector would resolve and the addresses it would open sockets to
    for ``url``: recorded, and none resolved or opened."""
    opened: list[str] = []

    def record(addr_info: aiohttp.AddrInfoType) -> socket.socket:
        opened.append(str(addr_info[4][0]))
        raise OSError("recorded, never opened")

    resolver = NoDns()
    connector = aiohttp.TCPConnector(resolver=resolver, socket_factory=record, use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        with contextlib.suppress(aiohttp.ClientError, ValueError):
            async with session.get(url, allow_redirects=False):
                pass
    return resolver.names, opened


HOSTS_SPELLED = st.one_of(
    ipv4_spelled().map(lambda case: case[1]),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
    st.sampled_from(sorted(BYPASSES)),
)


@given(HOSTS_SPELLED)
@quick
def test_the_guard_judges_the_address_the_connector_would_reach(host: str) -> None:
    url = f"http://{host}:8080/"
    names, opened = asyncio.run(reached(url))
    read = url_host(url)
    for address in opened:  # a literal address: straight to a socket
        assert ipaddress.ip_address(address.split("%", 1)[0]) == read
    for name in names:  # a name (the resolver, guarded, judges its addresses)
        assert name == read or literal_address(name) == read
    assert len(names) + len(opened) <= 1


# ---- the guarded connector ----------------------------------------------------------------


@pytest.fixture
async def listener() -> AsyncIterator[tuple[list[str], int]]:
    """A server on 127.0.0.1 that records the paths it is asked for; yield them and its port."""
    asked: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.Response(text="here")

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    async with serve_aiohttp(app) as base:
        yield asked, int(base.rsplit(":", 1)[1])


async def get_through_the_guard(url: str, networks: str = "") -> str:
    """GET ``url`` through a guarded connector, skipping the call-site check; the answer's
    text, or why the guard refused."""
    connector = guarded_connector(parse_networks(networks))
    async with aiohttp.ClientSession(connector=connector) as session:
        try:
            async with session.get(url, allow_redirects=False) as answer:
                return await answer.text()
        except aiohttp.ClientError as exc:
            reason = refused_reason(exc)
            assert reason is not None, exc
            return f"refused: {reason}"


@pytest.mark.parametrize(
    "host", ["⓪.⓪.⓪.⓪", "0.0.0.0", "[::]", "[::ffff:0.0.0.0]", "[64:ff9b::a9fe:a9fe]"]
)
async def test_the_connector_opens_no_socket_to_a_refused_address(
    listener: tuple[list[str], int], sockets: Sockets, host: str
) -> None:
    asked, port = listener
    answer = await get_through_the_guard(f"http://{host}:{port}/x")
    assert answer.startswith("refused: ")
    assert sockets.asked == [] and asked == []


async def test_the_connector_applies_the_allow_list_to_a_unicode_spelled_address(
    listener: tuple[list[str], int], sockets: Sockets
) -> None:
    asked, port = listener
    answer = await get_through_the_guard(f"http://{FULLWIDTH_LOOPBACK}:{port}/x", "10.0.0.0/8")
    assert answer == "refused: 127.0.0.1 is outside A2AC_AGENT_NETWORKS"
    assert sockets.asked == [] and asked == []
    assert await get_through_the_guard(f"http://{FULLWIDTH_LOOPBACK}:{port}/x") == "here"
    assert sockets.asked == [("127.0.0.1", port)] and asked == ["/x"]


class Resolving(AbstractResolver):
    """Resolves every name to one address, without DNS."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        return [ResolveResult(hostname=host, host=self.address, port=port, family=family,
                              proto=0, flags=socket.AI_NUMERICHOST)]  # fmt: skip

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(
    "address", ["64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::", "::a9fe:a9fe", "fd00:ec2::254"]
)
async def test_a_name_resolving_to_an_ipv6_form_of_a_refused_address_is_refused(
    address: str,
) -> None:
    with pytest.raises(AddressRefused):
        await GuardedResolver(inner=Resolving(address)).resolve("agent.test", 80)
