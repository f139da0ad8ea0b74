"""The streaming call to an agent: a JSON-RPC POST answered with `text/event-stream`.

Used for `SendStreamingMessage` / `message/stream` and `SubscribeToTask` /
`tasks/resubscribe`. Each SSE event's `data:` is one JSON-RPC object; it is yielded with
its exact bytes (the gateway relays them unchanged) and its decoded value. An agent that
answers a streaming request with plain JSON (a JSON-RPC error, say) yields that one object.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from a2a_continue.a2a.downstream import (
    AgentTarget,
    call_failed,
    call_headers,
    decode_rpc,
    no_answer,
)
from a2a_continue.errors import AgentBadAnswer, AgentTimeout, AgentUnreachable
from a2a_continue.settings import Network

_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Frame:
    """One JSON-RPC object of the agent's stream: its bytes as sent and its decoded value."""

    raw: bytes
    body: Any


class SseReader:
    """Split a byte stream into SSE events and return each event's `data` (joined lines)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._buffer = b""
        self._data: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the data of every event they complete."""
        self._buffer += chunk
        done: list[bytes] = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                break
            line, self._buffer = self._buffer[:end].rstrip(b"\r"), self._buffer[end + 1 :]
            data = self._line(line)
            if data is not None:
                done.append(data)
        if len(self._buffer) + self._size > self.max_bytes:
            raise AgentBadAnswer(
                f"a frame of the agent's stream is larger than {self.max_bytes} bytes"
            )
        return done

    def close(self) -> bytes | None:
        """End of stream: return a last event that lacked its blank line, if any."""
        if self._buffer:
            self._line(self._buffer.rstrip(b"\r"))
            self._buffer = b""
        return self._line(b"")

    def _line(self, line: bytes) -> bytes | None:
        if not line:
            if not self._data:
                return None
            data = b"\n".join(self._data)
            self._data, self._size = [], 0
            return data
        if line.startswith(b":"):
            return None
        name, _, value = line.partition(b":")
        if name == b"data":
            value = value[1:] if value.startswith(b" ") else value
            self._size += len(value) + 1
            if self._size > self.max_bytes:
                raise AgentBadAnswer(
                    f"a frame of the agent's stream is larger than {self.max_bytes} bytes"
                )
            self._data.append(value)
        return None


def decode_frame(raw: bytes, rpc_id: str) -> Frame:
    """Decode one JSON-RPC object of the stream; it must answer our request."""
    return Frame(raw, decode_rpc(raw, rpc_id, "a frame of the agent's stream"))


async def _next_chunk(response: aiohttp.ClientResponse, timeout_s: float) -> bytes:
    try:
        async with asyncio.timeout(timeout_s):
            return await response.content.readany()
    except TimeoutError:
        raise AgentTimeout(
            f"the agent's stream was silent for longer than {timeout_s:g} s"
        ) from None


async def _frames(
    response: aiohttp.ClientResponse, target: AgentTarget, rpc_id: str, max_bytes: int
) -> AsyncIterator[Frame]:
    if not 200 <= response.status < 300:
        raise AgentBadAnswer(f"the agent answered with HTTP {response.status}")
    if response.content_type != "text/event-stream":
        raw = b""
        while chunk := await _next_chunk(response, target.timeout_s):
            raw += chunk
            if len(raw) > max_bytes:
                raise AgentBadAnswer(f"the agent's answer is larger than {max_bytes} bytes")
        yield decode_frame(raw, rpc_id)
        return
    reader = SseReader(max_bytes)
    while chunk := await _next_chunk(response, target.timeout_s):
        for data in reader.feed(chunk):
            yield decode_frame(data, rpc_id)
    last = reader.close()
    if last is not None:
        yield decode_frame(last, rpc_id)


async def stream_rpc(
    session: aiohttp.ClientSession,
    target: AgentTarget,
    payload: dict[str, Any],
    max_bytes: int,
    networks: Sequence[Network] = (),
) -> AsyncGenerator[Frame, None]:
    """POST ``payload`` asking for a stream; yield each frame until the agent closes it.

    A silence longer than the agent's timeout (before the answer or between frames) raises
    AgentTimeout; a refused connection or a broken stream AgentUnreachable; a non-2xx
    answer, a frame that is not JSON-RPC or one over ``max_bytes`` AgentBadAnswer.
    """
    headers = {**call_headers(target, networks), "Accept": "text/event-stream"}
    try:
        async with asyncio.timeout(target.timeout_s):
            response = await session.post(
                target.endpoint_url,
                data=msgspec.json.encode(payload),
                headers=headers,
                allow_redirects=False,
                # A stream may run for a long time; silence is bounded per read instead.
                timeout=aiohttp.ClientTimeout(total=None),
            )
    except TimeoutError:
        raise no_answer(target) from None
    except aiohttp.ClientError as exc:
        raise call_failed(exc) from None
    try:
        async for frame in _frames(response, target, payload["id"], max_bytes):
            yield frame
    except aiohttp.ClientError as exc:
        raise AgentUnreachable(f"the agent's stream broke ({type(exc).__name__})") from None
    finally:
        # Closing (not releasing) drops a connection whose stream was left unread.
        response.close()
