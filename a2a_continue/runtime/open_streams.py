"""The streams one process serves: a cap on how many are open, the agent readers that keep
recording after their caller has gone, and what keeps thousands of open streams from stalling
the process.

An open stream is a hundred-odd objects the cyclic garbage collector tracks, and they live
long: with 10,000 streams each full collection walks a million objects, stalling the whole
process for a second or more. So, as streams accumulate, the objects that have survived so far
are frozen (`gc.freeze`: left out of every collection; refcounting still frees them when their
stream ends). The little cyclic garbage a closed stream leaves among frozen objects (a few
objects) is reclaimed when few streams remain open, or after RECLAIM_AFTER streams closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from sse_starlette.sse import AppStatus

from a2a_continue.errors import AppError
from a2a_continue.obs import metrics

log = logging.getLogger(__name__)

EXIT_CHECK_S = 0.5
# Freeze what survived once this many streams opened since the last freeze (and are open);
# reclaim (unfreeze, collect, freeze again) when fewer than RECLAIM_BELOW remain open, or
# after RECLAIM_AFTER streams closed while frozen.
FREEZE_EVERY = 256
RECLAIM_BELOW = 64
RECLAIM_AFTER = 50_000


class TooManyStreams(AppError):
    status, slug, title = 503, "too-many-streams", "Too many open streams"

    def __init__(self, limit: int) -> None:
        super().__init__(f"this process already serves {limit} streams; try again shortly")
        self.headers["Retry-After"] = "5"


class OpenStream:
    """One open stream; released once, however the stream ends."""

    def __init__(self, streams: OpenStreams) -> None:
        self._streams: OpenStreams | None = streams

    def release(self) -> None:
        """Give the place back (idempotent)."""
        if self._streams is not None:
            self._streams.closed()
            self._streams = None
            metrics.sse_stream(-1)


Stop = Callable[[], None]


class OpenStreams:
    """Count open SSE streams against a limit and own the background agent readers; end the
    live event streams when the server stops."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        # How to stop each live event stream; one watcher per process ends them at shutdown.
        self._live: dict[int, Stop] = {}
        self._exit: asyncio.Task[None] | None = None
        # Streams opened since the last freeze, closed since; whether anything is frozen.
        self._opened = self._closed = 0
        self._frozen = False

    def follow(self, stop: Stop) -> int:
        """Register a live stream's stop (called when the server begins to stop)."""
        if self._exit is None:
            self._exit = asyncio.create_task(self._stop_at_exit(), name="a2ac-streams-exit")
        key = id(stop)
        self._live[key] = stop
        return key

    def unfollow(self, key: int) -> None:
        """Forget a live stream that ended."""
        self._live.pop(key, None)

    async def _stop_at_exit(self) -> None:
        # The server's SIGTERM handler sets a flag (sse-starlette hooks it, for its own streams
        # as for these) and no event: one check per process twice a second, none per stream.
        while not AppStatus.should_exit:  # noqa: ASYNC110
            await asyncio.sleep(EXIT_CHECK_S)
        for stop in list(self._live.values()):
            stop()

    def take(self) -> OpenStream:
        """Take a place for a new stream, or refuse with 503."""
        if self.open >= self.limit:
            raise TooManyStreams(self.limit)
        self.open += 1
        metrics.sse_stream(1)
        self._opened += 1
        if self._opened >= FREEZE_EVERY and self.open >= FREEZE_EVERY:
            self._opened = 0
            # The young generations first, so that fresh garbage is not frozen with the rest.
            gc.collect(1)
            gc.freeze()
            self._frozen = True
        return OpenStream(self)

    def closed(self) -> None:
        """A stream ended (see OpenStream.release)."""
        self.open -= 1
        if self._frozen:
            self._closed += 1
            if self.open < RECLAIM_BELOW or self._closed >= RECLAIM_AFTER:
                self._closed = 0
                self._frozen = False
                gc.unfreeze()
                gc.collect()
                # What start-up froze (see ops.serving.settle_memory), frozen again.
                gc.freeze()

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``work`` independently of any request; it is cancelled at shutdown."""
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background stream %s failed", task.get_name(), exc_info=task.exception())

    async def idle(self) -> None:
        """Wait until every background reader has finished (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel the background readers and wait for them to clean up."""
        if self._exit is not None:
            self._exit.cancel()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await self.idle()
