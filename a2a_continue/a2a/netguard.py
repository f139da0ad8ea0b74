"""Where the gateway may connect: URL rules, refused addresses, the guarded connector.

Every outbound URL is judged by one decision (``url_problem``), on its host exactly as the
HTTP client connects to it: yarl's host, which IDNA/UTS-46 has already normalized (Unicode
and fullwidth digits and dots become the ASCII address they spell), read as an address in
any IPv4 spelling. A name is judged when it is resolved, on every address it resolves to
(``GuardedResolver``); and the connector's socket factory (``GuardedSockets``) judges the
address each socket is opened to, so no spelling reaches a refused address, literal or not.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import SplitResult, urlsplit

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from a2a_continue.errors import Invalid
from a2a_continue.settings import Network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

AGENT_NETWORKS = "A2AC_AGENT_NETWORKS"
LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
# Cloud metadata services outside the link-local ranges (which are refused anyway).
METADATA = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "fd00:ec2::254",  # AWS, IPv6 instance metadata
        "fd20:ce::254",  # Google Cloud, IPv6 metadata server
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure host endpoint (WireServer)
        "192.0.0.192",  # Oracle Cloud, legacy metadata
    )
)
# IPv6 ranges that carry an IPv4 address in their last 32 bits.
IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# The local-use NAT64 prefix: its operator chooses the prefix length (RFC 8215, RFC 6052).
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
# What inet_aton reads as IPv4 besides dotted quads: decimal, octal and hex numbers, and
# shortened forms ("2852039166", "0251.0376.0251.0376", "0xa9fea9fe", "169.254.43518").
_IPV4_LIKE = re.compile(r"(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}\.?", re.IGNORECASE)
# A host name as yarl gives it (IDNA-encoded, so ASCII): labels of letters, digits, - and _.
_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?", re.IGNORECASE)
_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")


class AddressRefused(aiohttp.ClientOSError):
    """An address the gateway never connects to (an aiohttp client error, so every outbound
    call reports it as a failed call)."""


def literal_address(host: str) -> Address | None:
    """Return the address an ASCII host spells literally (in any IPv4 spelling), or None."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    if _IPV4_LIKE.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host.rstrip(".")))
        except OSError:
            return None
    return None


def url_host(url: str) -> Address | str:
    """Read the host of ``url`` as the HTTP client connects to it: the address it spells, or
    the name to resolve; ValueError when it is neither or the URL has none."""
    host = yarl.URL(url).raw_host  # what aiohttp's connector uses, IDNA/UTS-46 applied
    if not host:
        raise ValueError("the URL has no host")
    address = literal_address(host)
    if address is not None:
        return address
    if ":" in host or not _NAME.fullmatch(host):
        raise ValueError(f"the host {host!r} is neither a name nor an address")
    return host


def _embedded(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each with the form that carries it."""
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in NAT64:
        return [("a NAT64 address", low)]
    if address in IPV4_TRANSLATED:
        return [("an IPv4-translated address", low)]
    if address in IPV4_COMPATIBLE and int(address) > 1:  # :: and ::1 are IPv6's own
        return [("an IPv4-compatible address", low)]
    if address.sixtofour is not None:
        return [("a 6to4 address", address.sixtofour)]
    if address.teredo is not None:
        server, client = address.teredo
        return [("a Teredo address", server), ("a Teredo address", client)]
    if address in NAT64_LOCAL:
        # Every RFC 6052 position a /48../96 prefix may use; unused positions read 0.0.0.0.
        n = int(address)
        spots = (
            ((n >> 64) & 0xFFFF) << 16 | ((n >> 40) & 0xFFFF),  # /48
            ((n >> 64) & 0xFF) << 24 | ((n >> 32) & 0xFFFFFF),  # /56
            (n >> 24) & 0xFFFFFFFF,  # /64
            n & 0xFFFFFFFF,  # /96
        )
        found = dict.fromkeys(ipaddress.IPv4Address(spot) for spot in spots if spot)
        return [("a local-use NAT64 address", v4) for v4 in found]
    return []


def _reason(address: Address) -> str | None:
    """What makes ``address`` itself one the gateway never connects to, or None."""
    if address in METADATA:
        return "a cloud metadata address"
    if address.is_link_local:
        return "link-local"
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address == LIMITED_BROADCAST:
        return "the broadcast address"
    return None


def address_problem(
    address: Address, networks: Sequence[Network] = (), setting: str = AGENT_NETWORKS
) -> str | None:
    """Say why the gateway must not connect to ``address``, or None when it may (``setting``
    names the allow-list ``networks`` came from).

    Refused: link-local, unspecified, multicast, broadcast and cloud metadata addresses, and
    IPv6 addresses that carry such an IPv4 address (NAT64, 6to4, Teredo, IPv4-compatible or
    -translated). An IPv4-mapped address is its IPv4 address (a socket connects to that);
    the allow-list is judged on the address connected to.
    """
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    reason = _reason(address)
    if reason is not None:
        return f"{address} is {reason}"
    if isinstance(address, ipaddress.IPv6Address):
        for form, inner in _embedded(address):
            reason = _reason(inner)
            if reason is not None:
                return f"{address} is {form} of {inner}, which is {reason}"
    if networks and not any(address in net for net in networks if net.version == address.version):
        return f"{address} is outside {setting}"
    return None


def url_problem(
    url: str, networks: Sequence[Network] = (), setting: str = AGENT_NETWORKS
) -> str | None:
    """Say why the gateway must not call ``url``, or None when it may (a name is judged again
    on the addresses it resolves to)."""
    return _url_problem(url, tuple(networks), setting)


@functools.lru_cache(maxsize=4096)
def _url_problem(url: str, networks: tuple[Network, ...], setting: str) -> str | None:
    # The answer depends only on the URL and the networks: worked out once per URL.
    try:
        host = url_host(url)
    except ValueError as exc:
        return f"its host cannot be read ({exc})"
    if isinstance(host, str):
        return None
    return address_problem(host, networks, setting)


def normalize_endpoint_url(
    url: str,
    networks: Sequence[Network] = (),
    *,
    loc: str = "$.endpointUrl",
    setting: str = AGENT_NETWORKS,
    what: str = "agents",
) -> str:
    """Check an agent endpoint URL (or, with ``loc``, ``setting`` and ``what``, another URL
    the gateway calls, such as a push webhook) and return it with its scheme in lower case;
    422 otherwise."""

    def _bad_url(msg: str) -> Invalid:
        return Invalid([{"loc": loc, "msg": msg}])

    if _SPACE_OR_CONTROL.search(url):
        raise _bad_url("must not contain spaces or control characters")
    try:
        parts = urlsplit_checked(url)
    except ValueError as exc:
        raise _bad_url(f"is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise _bad_url("must be an absolute http(s) URL")
    if parts.username is not None or parts.password is not None:
        raise _bad_url("must not carry credentials; put them in 'auth'")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise _bad_url("the port must be between 1 and 65535")
    checked = parts._replace(scheme=scheme).geturl()
    try:
        url_host(checked)
    except ValueError as exc:
        raise _bad_url(f"is not a valid URL ({exc})") from None
    problem = url_problem(checked, networks, setting)
    if problem is not None:
        raise _bad_url(f"{what} may not be reached at this address: {problem}")
    return checked


def urlsplit_checked(url: str) -> SplitResult:
    """Split ``url`` as urllib does, reading its host too (ValueError for a bad one)."""
    parts = urlsplit(url)
    parts.hostname  # noqa: B018  (a bracketed host that is no address raises here)
    return parts


def check_call_url(
    url: str, networks: Sequence[Network] = (), setting: str = AGENT_NETWORKS
) -> None:
    """Refuse, before calling, a URL whose host is an address the gateway must avoid."""
    problem = url_problem(url, networks, setting)
    if problem is not None:
        raise AddressRefused(problem)


def socket_problem(
    host: str, networks: Sequence[Network] = (), setting: str = AGENT_NETWORKS
) -> str | None:
    """Say why no socket may be opened to ``host`` (the numeric address the connector
    connects to), or None when one may."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        # The event loop would resolve it on its own, past the guarded resolver.
        return f"{host!r} is not a numeric address"
    return address_problem(address, networks, setting)


def open_socket(addr_info: aiohttp.AddrInfoType) -> socket.socket:
    """Open the socket of an address the guard allowed (what aiohttp does by default)."""
    family, type_, proto, _, _ = addr_info
    return socket.socket(family=family, type=type_, proto=proto)


class GuardedSockets:
    """The connector's socket factory: no socket is opened to a refused address, whatever
    way the connector came by it (a literal address skips the resolver)."""

    def __init__(self, networks: Sequence[Network] = (), setting: str = AGENT_NETWORKS) -> None:
        self.networks = tuple(networks)
        self.setting = setting

    def __call__(self, addr_info: aiohttp.AddrInfoType) -> socket.socket:
        """Open a socket to an allowed address; raise AddressRefused for another."""
        problem = socket_problem(str(addr_info[4][0]), self.networks, self.setting)
        if problem is not None:
            raise AddressRefused(problem)
        return open_socket(addr_info)


class GuardedResolver(AbstractResolver):
    """Resolve names, then drop every address the gateway must not connect to."""

    def __init__(
        self,
        networks: Sequence[Network] = (),
        inner: AbstractResolver | None = None,
        setting: str = AGENT_NETWORKS,
    ) -> None:
        self.networks = tuple(networks)
        self.setting = setting
        self.inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Return the allowed addresses of ``host``; raise AddressRefused when none is."""
        results = await self.inner.resolve(host, port, family)
        allowed, problems = [], []
        for result in results:
            problem = socket_problem(result["host"], self.networks, self.setting)
            if problem is None:
                allowed.append(result)
            else:
                problems.append(problem)
        if not allowed:
            why = problems[0] if problems else "no address"
            raise AddressRefused(f"{host} resolves only to refused addresses ({why})")
        return allowed

    async def close(self) -> None:
        """Close the inner resolver."""
        await self.inner.close()


def guarded_connector(
    networks: Sequence[Network] = (), setting: str = AGENT_NETWORKS, **options: Any
) -> aiohttp.TCPConnector:
    """A connector that reaches only addresses the guard allows (``options`` go to aiohttp)."""
    return aiohttp.TCPConnector(
        resolver=GuardedResolver(networks, setting=setting),
        socket_factory=GuardedSockets(networks, setting),
        **options,
    )


def refused_reason(exc: BaseException) -> str | None:
    """Return why a connection attempt was refused by this guard, or None."""
    seen: Any = exc
    while seen is not None:
        if isinstance(seen, AddressRefused):
            return str(seen)
        seen = getattr(seen, "os_error", None) or seen.__cause__ or seen.__context__
    return None
