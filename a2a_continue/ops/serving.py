"""Serving: the ``serve`` command's server (one process or N workers on one port), and an
ASGI app served inside an already running event loop (tests, demo)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import uvicorn
from uvicorn.supervisors.multiprocess import Multiprocess

from a2a_continue.app import create_app
from a2a_continue.http.edge import Edge
from a2a_continue.obs import logs
from a2a_continue.ops.protocol import http_protocol
from a2a_continue.settings import MAX_HEADER_BYTES, Settings, load_settings

# What every server of the gateway shares: no access log (the edge writes one line per
# request), no proxy headers (nothing here reads the client address), uvloop and httptools
# whenever they are installed, and a bound on each request's head (ops/protocol.py).
SERVER_OPTIONS: dict[str, Any] = {
    "loop": "auto",
    "http": http_protocol(),
    "access_log": False,
    "proxy_headers": False,
    "server_header": False,
    "log_config": None,
}


def run(settings: Settings) -> None:
    """Serve until SIGTERM or SIGINT, then drain (see ``uvicorn_config``)."""
    if settings.workers <= 1:
        app = create_app(settings)
        settle_memory()
        uvicorn.Server(uvicorn_config(app, settings)).run()
        return
    # The workers are fresh interpreters: they read their settings from the environment,
    # so put there what the parent resolved (embedded database URL, generated secrets).
    os.environ.update(
        A2AC_DATABASE_URL=settings.database_url or "",
        A2AC_JWT_SECRET=settings.jwt_secret,
        A2AC_ENCRYPTION_KEY=settings.encryption_key,
    )
    with _metrics_dir():
        config = uvicorn_config("a2a_continue.ops.serving:app_from_env", settings, factory=True)
        _Workers(config, sockets=[config.bind_socket()]).run()


def app_from_env() -> Edge:
    """Build the gateway of one ``serve --workers N`` worker from the environment."""
    settings = load_settings()
    logs.configure(settings.log_format, settings.log_level)
    app = create_app(settings)
    settle_memory()
    return app


def settle_memory() -> None:
    """Move what start-up allocated out of the collector's sight (modules, routes, tables):
    the collections that requests trigger then walk only what requests allocate."""
    gc.collect()
    gc.freeze()


def uvicorn_config(app: Any, settings: Settings, **extra: Any) -> uvicorn.Config:
    """The server of ``serve``: on SIGTERM it stops accepting, lets requests in flight
    finish for up to ``drain_s`` seconds, cancels the rest (their claims are released)."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        timeout_graceful_shutdown=max(1, round(settings.drain_s)),
        h11_max_incomplete_event_size=settings.max_header_bytes,  # see ops/protocol.py
        **SERVER_OPTIONS,
        **extra,
    )


class _Workers(Multiprocess):
    """uvicorn's supervisor, closing the shared socket as the workers start to drain."""

    def terminate_all(self) -> None:
        # The parent holds the listening socket too: close it, or connections would wait
        # in its backlog for the whole drain instead of being refused at once.
        for sock in self.sockets:
            sock.close()
        super().terminate_all()


@contextlib.contextmanager
def _metrics_dir() -> Iterator[None]:
    """A fresh directory the workers share their Prometheus series through."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        os.makedirs(given, exist_ok=True)
        for name in os.listdir(given):
            if name.endswith(".db"):
                os.remove(os.path.join(given, name))
        yield
        return
    path = tempfile.mkdtemp(prefix="a2ac-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


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
    app: Any,
    host: str = "127.0.0.1",
    lifespan: Literal["on", "off"] = "on",
    max_header_bytes: int = MAX_HEADER_BYTES,
    port: int = 0,
) -> AsyncIterator[str]:
    """Serve ``app`` on ``port`` (0: a free one) for the block; yield its base URL."""
    # Naming IPPROTO_TCP lets asyncio set TCP_NODELAY on accepted connections; without it,
    # small responses wait for delayed ACKs (about 40 ms each).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    options = {
        **SERVER_OPTIONS,
        "log_config": uvicorn.config.LOGGING_CONFIG,
        "h11_max_incomplete_event_size": max_header_bytes,
    }
    server = _LoopServer(uvicorn.Config(app, log_level="warning", lifespan=lifespan, **options))
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
