"""Serve an ASGI app with uvicorn inside an already running event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import uvicorn


class _LoopServer(uvicorn.Server):
    """A uvicorn server that leaves the host's signals alone and stops without polling."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._stopping = asyncio.Event()
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), 0.1)

    def stop(self) -> None:
        """Ask the server to shut down now."""
        self.should_exit = True
        self._stopping.set()


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
        ready = asyncio.create_task(server.ready.wait())
        await asyncio.wait({serving, ready}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if not server.started:
            sock.close()
            await asyncio.gather(serving, return_exceptions=True)
            raise RuntimeError("the server did not start; its log says why")
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        await asyncio.gather(serving, return_exceptions=True)
        sock.close()
