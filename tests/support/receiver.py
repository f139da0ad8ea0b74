"""A push receiver for the tests: a small aiohttp app that records each delivery and answers
with the statuses a test scripts (then 200)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiohttp import web

from tests.support.servers import serve_aiohttp


@dataclass
class Delivery:
    """One POST the receiver got."""

    headers: dict[str, str]
    raw: bytes
    status: int

    @property
    def body(self) -> Any:
        return msgspec.json.decode(self.raw)

    @property
    def delivery_id(self) -> str:
        return self.headers["A2A-Delivery-Id"]


@dataclass
class Receiver:
    """What the receiver got, and what it answers next (``answers`` first, then 200)."""

    url: str = ""
    got: list[Delivery] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    # Answer every delivery whose body holds this text with ``failing_status``.
    failing_text: str | None = None
    failing_status: int = 500

    def ok(self) -> list[Delivery]:
        return [d for d in self.got if 200 <= d.status < 300]

    def ids(self) -> list[str]:
        return [d.delivery_id for d in self.ok()]


@contextlib.asynccontextmanager
async def push_receiver(path: str = "/hook") -> AsyncIterator[Receiver]:
    """Serve a receiver at ``path`` for the block."""
    receiver = Receiver()

    async def hook(request: web.Request) -> web.Response:
        raw = await request.read()
        if receiver.answers:
            status = receiver.answers.pop(0)
        elif receiver.failing_text is not None and receiver.failing_text.encode() in raw:
            status = receiver.failing_status
        else:
            status = 200
        receiver.got.append(Delivery(dict(request.headers), raw, status))
        if 300 <= status < 400:
            return web.Response(status=status, headers={"Location": "http://127.0.0.1:1/x"})
        return web.Response(status=status)

    app = web.Application()
    app.router.add_post(path, hook)
    async with serve_aiohttp(app) as base:
        receiver.url = base + path
        yield receiver
