"""A PostgreSQL that freezes, stops and starts on cue: a proxy in front of the test server.

The gateway connects through the proxy (without TLS, so every server message is framed and
whole messages are forwarded). The proxy plays the server's faults:

- frozen: no byte moves either way and every connection stays open, as with a SIGSTOPped
  server (new connections are accepted and held too);
- stopping: open connections get PostgreSQL's fast-shutdown error (57P01) and close, new
  ones get "the database system is shutting down" (57P03);
- down: open connections close, new ones are reset at once (nothing listens);
- starting: open connections close, new ones get "the database system is starting up" (57P03);
- up: bytes flow.

``say_goodbye`` plays the instant of a stop between the two things a stopping server sends
each session, its fast-shutdown error and then the close: every open connection has read the
error, none has seen its socket close yet (until the next mode that closes them).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

Mode = Literal["up", "frozen", "stopping", "down", "starting"]

SSL_REQUEST = 80877103
SHUTDOWN = ("57P01", "terminating connection due to administrator command")
REFUSALS = {
    "stopping": ("57P03", "the database system is shutting down"),
    "starting": ("57P03", "the database system is starting up"),
}


def fatal(code: str, message: str) -> bytes:
    """A FATAL ErrorResponse as the server sends it."""
    fields = b"SFATAL\0VFATAL\0C" + code.encode() + b"\0M" + message.encode() + b"\0\0"
    return b"E" + struct.pack("!I", len(fields) + 4) + fields


class Link:
    """One client connection and its upstream one."""

    def __init__(self, client: asyncio.StreamWriter, server: asyncio.StreamWriter) -> None:
        self.client, self.server = client, server

    def cut(self, last: bytes = b"") -> None:
        """Send the client ``last`` (whole messages only reach it) and close both ends."""
        with contextlib.suppress(Exception):
            if last:
                self.client.write(last)
            self.client.close()
        with contextlib.suppress(Exception):
            self.server.transport.abort()


class FaultyDatabase:
    """The proxy; ``url`` is the database URL to give the gateway."""

    def __init__(self, upstream_url: str) -> None:
        self.upstream_url = upstream_url
        self.mode: Mode = "up"
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.links: set[Link] = set()
        self.held = 0  # client messages waiting for a frozen server
        # When set, the backend pid the server announces is replaced by this one, as a
        # connection pooler announces a key of its own.
        self.announced_pid: int | None = None
        self.url = ""
        self._server: asyncio.Server | None = None

    def set(self, mode: Mode) -> None:
        """Switch to ``mode`` (see the module's docstring)."""
        self.mode = mode
        if mode == "up":
            self.flowing.set()
        else:
            self.flowing.clear()
        if mode in ("stopping", "down", "starting"):
            # A stopped server holds no connection: a fast shutdown says why it ends them.
            last = fatal(*SHUTDOWN) if mode == "stopping" else b""
            for link in list(self.links):
                link.cut(last)
            self.links.clear()

    def say_goodbye(self) -> None:
        """Send every open connection the fast-shutdown error, keeping it open; new
        connections are refused as shutting down."""
        self.mode = "stopping"
        self.flowing.clear()
        for link in self.links:
            link.client.write(fatal(*SHUTDOWN))

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        parts = urlsplit(self.upstream_url)
        query = dict(parse_qsl(parts.query))
        port = parts.port or int(query.get("port", 5432))
        host = query.get("host") or parts.hostname or "127.0.0.1"
        if host.startswith("/"):
            return await asyncio.open_unix_connection(str(Path(host) / f".s.PGSQL.{port}"))
        return await asyncio.open_connection(host, port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "down":
            writer.transport.abort()
            return
        if self.mode in REFUSALS:
            await self._refuse(reader, writer, *REFUSALS[self.mode])
            return
        up_reader, up_writer = await self._open_upstream()
        link = Link(writer, up_writer)
        self.links.add(link)
        try:
            await asyncio.gather(
                self._client_to_server(reader, link), self._server_to_client(up_reader, link)
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.links.discard(link)
            link.cut()

    async def _refuse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, code: str, text: str
    ) -> None:
        """Read the startup packet, then answer it with the server's refusal."""
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                size = struct.unpack("!I", await reader.readexactly(4))[0]
                packet = await reader.readexactly(size - 4)
                if struct.unpack("!I", packet[:4])[0] != SSL_REQUEST:
                    break
                writer.write(b"N")
            writer.write(fatal(code, text))
            await writer.drain()
        writer.close()

    async def _client_to_server(self, reader: asyncio.StreamReader, link: Link) -> None:
        while chunk := await reader.read(65536):
            await self._wait_flowing()
            link.server.write(chunk)
        link.cut()

    async def _server_to_client(self, reader: asyncio.StreamReader, link: Link) -> None:
        while True:
            head = await reader.readexactly(5)
            body = await reader.readexactly(struct.unpack("!I", head[1:])[0] - 4)
            await self._wait_flowing()
            if link not in self.links:
                return
            if head[:1] == b"K" and self.announced_pid is not None:
                body = struct.pack("!I", self.announced_pid) + body[4:]
            link.client.write(head + body)

    async def _wait_flowing(self) -> None:
        if self.flowing.is_set():
            return
        self.held += 1
        try:
            await self.flowing.wait()
        finally:
            self.held -= 1

    async def start(self) -> str:
        """Listen on a free local port; return the URL the gateway connects to."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        parts = urlsplit(self.upstream_url)
        query = {k: v for k, v in parse_qsl(parts.query) if k not in ("host", "port")}
        query["sslmode"] = "disable"
        user = parts.username or "postgres"
        self.url = urlunsplit(
            parts._replace(netloc=f"{user}@127.0.0.1:{port}", query=urlencode(query))
        )
        return self.url

    async def close(self) -> None:
        """Stop listening and cut every connection."""
        self.flowing.set()
        for link in list(self.links):
            link.cut()
        if self._server is not None:
            self._server.close()


@contextlib.asynccontextmanager
async def faulty_database(upstream_url: str) -> AsyncIterator[FaultyDatabase]:
    """A proxy in front of ``upstream_url`` for the block."""
    proxy = FaultyDatabase(upstream_url)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
