"""The in-process fan-out of event notifications."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from a2a_continue.core.tasks.interest import INTEREST_ROWS
from a2a_continue.runtime.hub import EVENTS_CHANNEL, Hub
from tests.support.database import direct_url, with_application_name
from tests.support.db_faults import faulty_database
from tests.support.ports import dead_url
from tests.support.waiting import eventually


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


class Recording(Hub):
    """A hub that records the payload of every notification its connection receives."""

    def __init__(self, database_url: str, retry_s: float) -> None:
        super().__init__(database_url, rows=INTEREST_ROWS, retry_s=retry_s)
        self.received: list[str] = []

    def notify(self, payload: str) -> None:
        self.received.append(payload)
        super().notify(payload)


@pytest.fixture
async def hub(database_url: str) -> AsyncIterator[Recording]:
    """A started hub over the test database (tagged so a test can find its backend)."""
    hub = Recording(with_application_name(direct_url(database_url), "a2ac-hub-test"), retry_s=0.05)
    await hub.start()
    try:
        await asyncio.wait_for(hub.connected.wait(), 10)
        yield hub
    finally:
        await hub.stop()


async def notify(db: asyncpg.Connection, row_id: uuid.UUID) -> None:
    await db.execute("SELECT pg_notify($1, $2)", EVENTS_CHANNEL, str(row_id))


async def test_the_listener_wakes_waiters_on_a_notify_from_any_connection(
    hub: Recording, db: asyncpg.Connection
) -> None:
    task = uuid.uuid4()
    with hub.waiter(task) as waiter:
        assert await waiter.wait(10)  # its interest took effect: listening, row committed
        await notify(db, task)
        assert await waiter.wait(10)
        assert hub.received == [str(task)]


async def test_hub_does_not_listen_while_no_stream_waits(
    hub: Recording, db: asyncpg.Connection
) -> None:
    unheard, heard = uuid.uuid4(), uuid.uuid4()
    assert not hub.listening
    await notify(db, unheard)
    with hub.waiter(heard):
        await eventually(lambda: hub.listening)
        await notify(db, heard)
        # Notifications arrive in commit order: had the first been delivered, it would be here.
        await eventually(lambda: str(heard) in hub.received)
    assert hub.received == [str(heard)]


async def test_hub_listens_while_a_stream_waits_and_wakes_it(
    hub: Recording, db: asyncpg.Connection
) -> None:
    task, other = uuid.uuid4(), uuid.uuid4()
    with hub.waiter(task) as waiter, hub.waiter(other) as bystander:
        # Each is woken once when its interest takes effect (LISTEN active, row committed),
        # which may come a while after `listening` turns true: wait for that wake, not a time.
        assert await waiter.wait(10) and await bystander.wait(10)
        assert hub.listening
        await notify(db, task)
        await eventually(lambda: str(task) in hub.received)
        # A notification is fanned out as it is received: its task's waiter only.
        assert await waiter.wait(0)
        assert not await bystander.wait(0)


async def test_hub_stops_listening_when_the_last_waiter_leaves(
    hub: Recording, db: asyncpg.Connection
) -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    with hub.waiter(first):
        with hub.waiter(second) as waiter:
            await eventually(lambda: hub.listening)
        # One waiter is left: still listening, still woken.
        await waiter.wait(0)
        await notify(db, first)
        await eventually(lambda: str(first) in hub.received)
        assert hub.listening
    await eventually(lambda: not hub.listening)
    unheard = uuid.uuid4()
    await notify(db, unheard)
    with hub.waiter(second):
        await eventually(lambda: hub.listening)
        await notify(db, second)
        await eventually(lambda: str(second) in hub.received)
    assert hub.received == [str(first), str(second)]


async def test_hub_wakes_waiters_when_listening_starts(hub: Recording) -> None:
    task = uuid.uuid4()
    for _ in range(2):  # the first time, and again once re-enabled
        with hub.waiter(task) as waiter:
            await eventually(lambda: hub.listening)
            assert await waiter.wait(10)
        await eventually(lambda: not hub.listening)
    assert hub.received == []


async def test_hub_listens_again_and_wakes_waiters_after_a_reconnect(
    hub: Recording, db: asyncpg.Connection
) -> None:
    task = uuid.uuid4()
    with hub.waiter(task) as waiter:
        await eventually(lambda: hub.listening)
        assert await waiter.wait(10)
        await db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'a2ac-hub-test' AND datname = current_database()"
        )
        # Only listening starting again, on a new connection, wakes it.
        assert await waiter.wait(10)
        assert hub.listening
        await notify(db, task)
        assert await waiter.wait(10)
        assert hub.received == [str(task)]


def settled(hub: Hub) -> bool:
    """Whether the hub has applied every change: it LISTENs iff a waiter exists."""
    return hub.listening == bool(hub._waiters) and not hub._changed.is_set()


async def turns(n: int) -> None:
    """Let other tasks (the hub's) run n times."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_hub_listens_iff_a_stream_waits_whatever_the_churn(
    hub: Recording, db: asyncpg.Connection
) -> None:
    task = uuid.uuid4()
    for n in range(8):
        # A waiter arrives and leaves with n turns of the hub's task between...
        with hub.waiter(task):
            await turns(n)
        await turns(n)
        # ...another stays until the hub listens; the next arrives n turns after it left.
        with hub.waiter(task):
            await eventually(lambda: hub.listening)
        await turns(n)
        with hub.waiter(task) as waiter:
            await eventually(lambda: settled(hub))
            assert hub.listening
            await waiter.wait(0)  # the wake of listening starting, if it restarted
            await notify(db, task)
            assert await waiter.wait(10)
        await eventually(lambda: settled(hub))
        assert not hub.listening
    unheard = uuid.uuid4()
    await notify(db, unheard)
    with hub.waiter(task):
        await eventually(lambda: settled(hub))
        await notify(db, task)
        await eventually(lambda: hub.received.count(str(task)) == 9)
    assert str(unheard) not in hub.received


async def test_a_listener_that_cannot_connect_keeps_retrying_and_stops_cleanly() -> None:
    hub = Hub(
        rows=INTEREST_ROWS,
        database_url=dead_url().replace("http://", "postgresql://postgres@"),
        retry_s=0.05,
    )
    await hub.start()
    await asyncio.sleep(0.3)
    assert not hub.connected.is_set()
    await asyncio.wait_for(hub.stop(), 5)


async def test_a_listener_behind_a_connection_pooler_never_listens_and_says_why(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with faulty_database(direct_url(database_url)) as pooler:
        pooler.announced_pid = 424242  # as PgBouncer announces a key of its own
        hub = Hub(rows=INTEREST_ROWS, database_url=pooler.url, retry_s=0.05)
        await hub.start()
        try:
            await eventually(
                lambda: "event listener refused" in caplog.text, "the refusal logged", within_s=10
            )
            assert not hub.connected.is_set()
            assert "A2AC_LISTEN_DATABASE_URL" in caplog.text
        finally:
            await asyncio.wait_for(hub.stop(), 5)
