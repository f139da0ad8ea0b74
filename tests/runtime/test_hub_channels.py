"""Other channels the hub listens on for as long as it is connected (the push outbox's)."""

from __future__ import annotations

import asyncio

import asyncpg

from a2a_continue.core.tasks.interest import INTEREST_ROWS
from a2a_continue.runtime.hub import Hub
from tests.support.database import direct_url
from tests.support.waiting import eventually


async def test_a_channel_notification_wakes_its_callback(
    database_url: str, db: asyncpg.Connection
) -> None:
    woken: list[int] = []
    hub = Hub(rows=INTEREST_ROWS, database_url=direct_url(database_url))
    hub.on_channel("a2ac_test_channel", lambda: woken.append(1))
    await hub.start()
    try:
        await asyncio.wait_for(hub.connected.wait(), 20)
        # A (re)connect wakes it once: anything notified while disconnected is read then.
        await eventually(lambda: len(woken) == 1, "the wake on connect")
        await db.execute("SELECT pg_notify('a2ac_test_channel', '')")
        await eventually(lambda: len(woken) == 2, "the wake on the notification")
    finally:
        await hub.stop()
