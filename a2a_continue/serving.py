"""Serve an ASGI app with uvicorn inside an already running event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import uvicorn


class _LoopServer(uvicorn.Server):
    """A uvicorn server that leaves the host program's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_in_loop(
    app: Any, host: str = "127.0.0.1", lifespan: Literal["on", "off"] = "on"
) -> AsyncIterator[str]:
    """Serve ``app`` on a free port for the block; yield its base URL."""
    # Naming IPPROTO_TCP lets asyncio set TCP_NODELAY on accepted connections; without it,
    # small responses wait for delayed ACKs (about 40 ms each).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = _LoopServer(uvicorn.Config(app, log_level="warning", lifespan=lifespan))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                serving.result()  # surface the start-up failure
            await asyncio.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await serving
        sock.close()
