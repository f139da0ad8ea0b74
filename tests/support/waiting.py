"""Bounded waits on conditions that background work makes true."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T | None] | T | None],
    what: str = "the condition held",
    within_s: float = 20,
) -> T:
    """Wait until ``check`` (sync or async) returns something but None or False; return it."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = check()
        if inspect.isawaitable(found):
            found = await found
        if found is not None and found is not False:
            return found
        await asyncio.sleep(0.02)
    pytest.fail(f"never happened: {what}")
