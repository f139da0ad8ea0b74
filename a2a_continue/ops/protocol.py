"""The HTTP/1.1 protocol every server of the gateway speaks: uvicorn's httptools protocol, with
its writes joined and each request's head bounded as it arrives."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec

from a2a_continue.errors import PROBLEM_JSON, HeadersTooLarge
from a2a_continue.obs.telemetry import new_id

log = logging.getLogger(__name__)

# How long a refused connection keeps reading (and dropping) what the client still sends, so
# that closing it does not reset the connection before the client has read the refusal.
LINGER_S = 2.0


class _JoinedWrites:
    """A transport that joins the writes of one event-loop step into one send.

    uvicorn writes a response's head and its body separately: two system calls and two
    packets for every small answer. Joining them halves that and wakes the client once.
    """

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._pending is None:
            self._pending = [data]
            self._loop.call_soon(self._flush)
        else:
            self._pending.append(data)

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def refusal(max_bytes: int, date_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The whole 431 answer to a request whose head passed ``max_bytes``."""
    error = HeadersTooLarge(
        f"the request's head (request line and headers) is over {max_bytes} bytes;"
        " send smaller headers (the bound is A2AC_MAX_HEADER_BYTES)"
    )
    body = msgspec.json.encode(error.body())
    lines = [b"HTTP/1.1 431 Request Header Fields Too Large"]
    lines += [name + b": " + value for name, value in date_headers]
    lines += [
        b"content-type: " + PROBLEM_JSON.encode(),
        b"content-length: " + str(len(body)).encode(),
        b"x-request-id: " + new_id().encode(),
        b"connection: close",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # no httptools: uvicorn's default protocol (h11 bounds heads itself)
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


if HttpToolsProtocol is not None:

    class GatewayProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol writing through ``_JoinedWrites``, refusing a request
        whose head grows past the bound before more of it is buffered.

        httptools has no bound of its own: it keeps a header however long it grows. This one
        feeds the parser at most the bound's bytes of a head; a head not complete by then is
        answered 431. The bound is the config's ``h11_max_incomplete_event_size``, the same
        setting uvicorn's h11 protocol bounds heads with. Leans on uvicorn's protocol class
        (an accepted value of its ``http`` option), its ``connection_made``,
        ``data_received`` and parser callbacks; pinned by the uvicorn range in pyproject.toml.
        """

        # Bytes the head being received may still have; None while a body is being read.
        _head_room: int | None = None
        _refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(_JoinedWrites(transport, self.loop))  # type: ignore[arg-type]
            self._head_room = self._max_head()

        def _max_head(self) -> int:
            bound: int | None = self.config.h11_max_incomplete_event_size
            return bound if bound is not None else 1 << 62

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # dropped: the connection closes once the client has the answer
            while self._head_room is not None:
                room = self._head_room
                part, data = data[:room], data[room:]
                self._head_room = room - len(part)
                if part:
                    super().data_received(part)
                if not data or self.parser is None or self.transport.is_closing():
                    return
                if self._head_room == 0:
                    self._refuse()
                    return
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._head_room = None
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._head_room = self._max_head()
            super().on_message_complete()

        def _refuse(self) -> None:
            """Answer 431 and close: at once after the answer, or once the client stops."""
            self._refused = True
            log.warning(
                "a request's head passed %d bytes: answered 431, closing the connection",
                self._max_head(),
            )
            if self.cycle is not None and not self.cycle.response_complete:
                self.transport.close()  # a response is under way: no answer can follow it
                return
            self.transport.write(refusal(self._max_head(), self.server_state.default_headers))
            if not self.transport.can_write_eof():
                self.transport.close()
                return
            # Half-close and go on reading (and dropping) what the client still sends: a
            # close with unread data would reset the connection, losing the answer.
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)


def http_protocol() -> Any:
    """The ``http`` option of every server of the gateway."""
    return GatewayProtocol if HttpToolsProtocol is not None else "auto"
