"""Background work of one process: run a coroutine beside a block, and stop a task for good."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (if any) and return once it has ended; its cancellation is not raised."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, None], name: str | None = None) -> AsyncIterator[None]:
    """Run ``work`` in the background while the block runs; cancel it when the block ends."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        await cancel_and_wait(task)
