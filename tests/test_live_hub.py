"""The in-process fan-out of event notifications."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from a2a_continue.live.hub import Hub
from a2a_continue.tasks import EVENTS_CHANNEL
from tests.conftest import dead_url


async def test_a_notification_wakes_only_the_waiters_of_its_task() -> None:
    hub = Hub(None)
    mine, other = uuid.uuid4(), uuid.uuid4()
    with hub.waiter(mine) as a, hub.waiter(mine) as b, hub.waiter(other) as c:
        hub.notify(str(mine))
        hub.notify("not a uuid")
        assert await a.wait(5) and await b.wait(5)
        assert not await c.wait(0.05)
    assert hub._waiters == {}


async def test_a_waiter_re_arms_after_each_wake() -> None:
    hub = Hub(None)
    task = uuid.uuid4()
    with hub.waiter(task) as waiter:
        waiter.wake()
        assert await waiter.wait(5)
        assert not await waiter.wait(0.05)


async def test_the_listener_wakes_waiters_on_a_notify_from_any_connection(
    database_url: str, db: asyncpg.Connection
) -> None:
    hub = Hub(database_url)
    await hub.start()
    try:
        await asyncio.wait_for(hub.connected.wait(), 10)
        task = uuid.uuid4()
        with hub.waiter(task) as waiter:
            await db.execute("SELECT pg_notify($1, $2)", EVENTS_CHANNEL, str(task))
            assert await waiter.wait(10)
    finally:
        await hub.stop()


async def test_a_listener_that_cannot_connect_keeps_retrying_and_stops_cleanly() -> None:
    hub = Hub(dead_url().replace("http://", "postgresql://postgres@"), retry_s=0.05)
    await hub.start()
    await asyncio.sleep(0.3)
    assert not hub.connected.is_set()
    await asyncio.wait_for(hub.stop(), 5)
