"""Where agents may live: endpoint URL rules, refused addresses, the guarded DNS resolver."""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from a2a_continue.errors import Invalid
from a2a_continue.settings import Network

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
# What inet_aton reads as IPv4 besides dotted quads: decimal, octal and hex numbers, and
# shortened forms ("2852039166", "0251.0376.0251.0376", "0xa9fea9fe", "169.254.43518").
_IPV4_LIKE = re.compile(r"(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}\.?", re.IGNORECASE)


_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")


class AddressRefused(aiohttp.ClientOSError):
    """An agent's address is one the gateway never connects to (an aiohttp client error, so
    every outbound call reports it as a failed call to the agent)."""


def literal_address(host: str) -> Address | None:
    """Return the address a URL host spells literally (in any IPv4 spelling), or None."""
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


def address_problem(
    address: Address, networks: Sequence[Network] = (), setting: str = "A2AC_AGENT_NETWORKS"
) -> str | None:
    """Say why the gateway must not connect to ``address``, or None when it may (``setting``
    names the allow-list ``networks`` came from)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_link_local:
        return f"{address} is link-local"
    if address.is_unspecified:
        return f"{address} is unspecified"
    if address.is_multicast:
        return f"{address} is multicast"
    if address == LIMITED_BROADCAST:
        return f"{address} is the broadcast address"
    if networks and not any(address in net for net in networks if net.version == address.version):
        return f"{address} is outside {setting}"
    return None


def normalize_endpoint_url(
    url: str,
    networks: Sequence[Network] = (),
    *,
    loc: str = "$.endpointUrl",
    setting: str = "A2AC_AGENT_NETWORKS",
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
        parts = urlsplit(url)
        parts.hostname  # noqa: B018  (a bracketed host that is no address raises here)
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
    address = literal_address(parts.hostname)
    if address is not None:
        problem = address_problem(address, networks, setting)
        if problem is not None:
            raise _bad_url(f"{what} may not be reached at this address: {problem}")
    return urlunsplit(parts._replace(scheme=scheme))


def check_call_url(
    url: str, networks: Sequence[Network] = (), setting: str = "A2AC_AGENT_NETWORKS"
) -> None:
    """Refuse, at call time, a URL whose host is a literal address the gateway must avoid.

    aiohttp does not pass literal addresses through the resolver, so every outbound call
    checks its URL here first.
    """
    problem = _call_url_problem(url, tuple(networks), setting)
    if problem is not None:
        raise AddressRefused(problem)


@functools.lru_cache(maxsize=4096)
def _call_url_problem(url: str, networks: tuple[Network, ...], setting: str) -> str | None:
    # The answer depends only on the URL and the networks: worked out once per URL.
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None  # not a URL aiohttp can call either; it fails the call on its own
    address = literal_address(host) if host else None
    return address_problem(address, networks, setting) if address is not None else None


class GuardedResolver(AbstractResolver):
    """Resolve names, then drop every address the gateway must not connect to."""

    def __init__(
        self,
        networks: Sequence[Network] = (),
        inner: AbstractResolver | None = None,
        setting: str = "A2AC_AGENT_NETWORKS",
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
            address = ipaddress.ip_address(result["host"])
            problem = address_problem(address, self.networks, self.setting)
            if problem is None:
                allowed.append(result)
            else:
                problems.append(problem)
        if not allowed:
            raise AddressRefused(f"{host} resolves only to refused addresses ({problems[0]})")
        return allowed

    async def close(self) -> None:
        """Close the inner resolver."""
        await self.inner.close()


def refused_reason(exc: BaseException) -> str | None:
    """Return why a connection attempt was refused by this guard, or None."""
    seen: Any = exc
    while seen is not None:
        if isinstance(seen, AddressRefused):
            return str(seen)
        seen = getattr(seen, "os_error", None) or seen.__cause__ or seen.__context__
    return None
