"""The servers' HTTP protocol: a request head past ``A2AC_MAX_HEADER_BYTES`` is answered 431
(problem+json) before more of it is buffered, and the connection is closed cleanly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import msgspec
import pytest
from starlette.types import Receive, Scope, Send

from a2a_continue.ops.serving import serve_in_loop
from tests.support.processes import GatewayProcess

MIB = 1024 * 1024
BOUND = 4096


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer how many body bytes came, with a content-length (the connection stays open)."""
    if scope["type"] != "http":
        return
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(size).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def head(size: int, method: str = "GET", extra: str = "") -> bytes:
    """A request head of exactly ``size`` bytes (its padding header makes up the rest)."""
    start = f"{method} /healthz HTTP/1.1\r\nHost: gw\r\n{extra}X-Pad: ".encode()
    pad = size - len(start) - 4
    assert pad >= 0
    return start + b"a" * pad + b"\r\n\r\n"


async def read_answer(reader: asyncio.StreamReader) -> Answer:
    """One HTTP/1.1 answer with a content-length."""
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    status_line, *lines = raw.decode("latin-1").split("\r\n")[:-2]
    headers = dict(line.split(": ", 1) for line in lines)
    headers = {k.lower(): v for k, v in headers.items()}
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 30)
    return Answer(int(status_line.split(" ")[1]), headers, body)


Connect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """Open connections to ``echo`` served by the gateway's server with a 4 KiB head bound."""
    opened: list[asyncio.StreamWriter] = []
    async with serve_in_loop(echo, lifespan="off", max_header_bytes=BOUND) as base:
        port = int(base.rsplit(":", 1)[1])

        async def open_one() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            opened.append(writer)
            return reader, writer

        yield open_one
        for writer in opened:
            writer.close()


def assert_refused(answer: Answer, bound: int) -> None:
    assert answer.status == 431
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["connection"] == "close"
    assert answer.headers["x-request-id"]
    problem = msgspec.json.decode(answer.body)
    assert problem["type"] == "urn:a2a-continue:problem:headers-too-large"
    assert problem["status"] == 431
    assert str(bound) in problem["detail"]
    assert "A2AC_MAX_HEADER_BYTES" in problem["detail"]


async def test_a_head_of_exactly_the_bound_is_served_and_one_byte_more_is_refused(
    connect: Connect,
) -> None:
    reader, writer = await connect()
    writer.write(head(BOUND))
    assert (await read_answer(reader)).status == 200
    reader, writer = await connect()
    writer.write(head(BOUND + 1))
    assert_refused(await read_answer(reader), BOUND)
    assert await asyncio.wait_for(reader.read(), 30) == b""  # closed after the answer


async def test_a_16_mib_header_is_refused_and_the_client_reads_the_answer_without_a_reset(
    connect: Connect,
) -> None:
    reader, writer = await connect()
    writer.write(head(16 * MIB))
    # The server goes on reading (and dropping) what is sent, so all of it can be written...
    await asyncio.wait_for(writer.drain(), 60)
    # ...and the answer is read whole, then the end of the connection, with no reset.
    assert_refused(await read_answer(reader), BOUND)
    assert await asyncio.wait_for(reader.read(), 30) == b""


async def test_a_body_sent_with_its_head_does_not_count_toward_the_bound(
    connect: Connect,
) -> None:
    reader, writer = await connect()
    body = b"x" * (MIB // 4)
    writer.write(head(BOUND, "POST", f"Content-Length: {len(body)}\r\n") + body)
    answer = await read_answer(reader)
    assert (answer.status, answer.body) == (200, str(len(body)).encode())


async def test_each_request_of_a_kept_alive_connection_has_the_whole_bound(
    connect: Connect,
) -> None:
    reader, writer = await connect()
    for _ in range(3):  # together far past the bound, each within it
        writer.write(head(BOUND))
        assert (await read_answer(reader)).status == 200
    writer.write(head(BOUND + 1))
    assert_refused(await read_answer(reader), BOUND)


async def test_serve_refuses_a_16_mib_header_with_431_and_serves_a_head_under_its_bound(
    spawn_gateway: Callable[..., Awaitable[GatewayProcess]],
) -> None:
    gateway = await spawn_gateway()
    port = int(gateway.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(16 * MIB))
    await asyncio.wait_for(writer.drain(), 60)
    assert_refused(await read_answer(reader), 64 * 1024)
    assert await asyncio.wait_for(reader.read(), 30) == b""
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(65 * 1024))  # a 65 KiB head
    assert_refused(await read_answer(reader), 64 * 1024)
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(60 * 1024))
    answer = await read_answer(reader)
    assert answer.status == 200
    assert msgspec.json.decode(answer.body) == {"status": "ok"}
    writer.close()


async def test_serve_bounds_heads_by_a2ac_max_header_bytes(
    spawn_gateway: Callable[..., Awaitable[GatewayProcess]],
) -> None:
    gateway = await spawn_gateway(A2AC_MAX_HEADER_BYTES="2048")
    port = int(gateway.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(2048))
    assert (await read_answer(reader)).status == 200
    writer.write(head(2049))
    assert_refused(await read_answer(reader), 2048)
    writer.close()
