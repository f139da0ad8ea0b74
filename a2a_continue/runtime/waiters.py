"""What one live event stream waits on in its process's hub."""

from __future__ import annotations

import asyncio
import uuid


class Waiter:
    """What one stream waits on: a wake-up for its task (a notification, the hub's poll).

    A stream says what it has seen (``seen``: its last seq; ``scope``: who could see the task,
    as `SCOPE_SQL` put it; ``agent``), so the hub's poll wakes it only when there is news;
    ``recheck`` asks it to read with its caller's scope again.
    """

    __slots__ = ("_woken", "agent", "recheck", "scope", "seen")

    def __init__(self) -> None:
        self._woken = asyncio.Event()
        self.seen: int | None = None
        self.scope: str | None = None
        self.agent: uuid.UUID | None = None
        self.recheck = False

    def wake(self) -> None:
        """Wake the stream (a notification for its task, or a listener that reconnected)."""
        self._woken.set()

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait until woken (or ``timeout_s`` pass); return whether it was woken. Re-arms."""
        try:
            if timeout_s is None:
                await self._woken.wait()
            else:
                async with asyncio.timeout(timeout_s):
                    await self._woken.wait()
        except TimeoutError:
            return False
        finally:
            self._woken.clear()
        return True
