"""Serve ASGI and aiohttp apps on free local ports inside the test's event loop."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

from aiohttp import web

from a2a_continue.ops.serving import serve_in_loop


def serve_asgi(app: Any, lifespan: Literal["on", "off"] = "on", port: int = 0) -> Any:
    """Serve ``app`` with uvicorn on ``port`` (0: a free one) for the block; yield its base URL."""
    return serve_in_loop(app, lifespan=lifespan, port=port)


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
