"""Local ports: one free to listen on, one already taken, and a URL nothing listens on."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


def free_port() -> int:
    """A local port free right now (pick it right before it is bound)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def dead_url() -> str:
    """A local URL nothing listens on."""
    return f"http://127.0.0.1:{free_port()}/"


@contextlib.contextmanager
def busy_port() -> Iterator[int]:
    """A local port something listens on until the block ends."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port: int = sock.getsockname()[1]
        yield port
