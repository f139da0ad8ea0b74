"""The tests' last line of defence: the gateway's guarded connectors open sockets to
loopback only, and every socket they ask for is recorded."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

import aiohttp

from a2a_continue.a2a import netguard

LOOPBACK_ONLY = "the tests open sockets to loopback addresses only"
# The guard's own opener, taken before any test replaces it with a recorder.
OPEN_SOCKET = netguard.open_socket


@dataclass
class Sockets:
    """Every socket a guarded connector asked for (the address and port it was to reach);
    one to anything but loopback is refused, never opened."""

    asked: list[tuple[str, int]] = field(default_factory=list)

    def __call__(self, addr_info: aiohttp.AddrInfoType) -> socket.socket:
        host, port = str(addr_info[4][0]), int(addr_info[4][1])
        self.asked.append((host, port))
        try:
            loopback = ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise OSError(LOOPBACK_ONLY)
        return OPEN_SOCKET(addr_info)

    def to_port(self, port: int) -> list[str]:
        """The addresses sockets were asked for on ``port``."""
        return [host for host, asked in self.asked if asked == port]
