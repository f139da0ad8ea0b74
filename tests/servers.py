"""Serve ASGI and aiohttp apps on free local ports inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import uvicorn
from aiohttp import web


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves the test runner's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_asgi(app: Any, lifespan: Literal["on", "off"] = "on") -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free port for the block; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan=lifespan)
    server = _QuietServer(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                serving.result()  # surface the startup failure
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving
        sock.close()


@contextlib.asynccontextmanager
async def serve_aiohttp(app: web.Application) -> AsyncIterator[str]:
    """Serve an aiohttp app on a free port for the block; yield its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
