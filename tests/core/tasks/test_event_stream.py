"""The live event stream of a task (§8.3): replay, live tail, resume, until, fan-out, limits."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest

from a2a_continue.app import create_app
from a2a_continue.core.tasks.event_stream import READ_EVENTS, READ_TASK_EVENTS
from a2a_continue.core.tasks.interest import POLL
from a2a_continue.core.tasks.store import append_event, record_outcome
from a2a_continue.settings import Settings
from tests.support.client import Client, register, token
from tests.support.database import direct_url
from tests.support.processes import GatewayProcess
from tests.support.servers import serve_asgi
from tests.support.sse_client import Event, events
from tests.support.waiting import eventually

ALICE = "alice@example.com"
STREAM = {"Accept": "text/event-stream"}


@contextlib.asynccontextmanager
async def gateway(settings: Settings, **changes: Any) -> AsyncIterator[Client]:
    """A gateway of its own (own pool, own listener) with some settings changed."""
    app = create_app(msgspec.structs.replace(settings, **changes))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as http:
        yield Client(base, http)


@pytest.fixture
async def live(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    """A gateway whose fallback poll is too slow to matter: only notifications wake streams."""
    async with gateway(settings, stream_poll_s=60) as client:
        yield client


async def seed(
    db: asyncpg.Connection, count: int = 1, state: str = "working", visibility: str = "private"
) -> tuple[uuid.UUID, uuid.UUID]:
    """An agent of alice's, a task of hers in ``state`` and ``count`` events; (agent, row)."""
    agent = uuid.uuid4()
    await db.execute(
        "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner, visibility)"
        " VALUES ($1, 'w', 'http://127.0.0.1:9/', '1.0', $2, $3)",
        agent,
        ALICE,
        visibility,
    )
    row: uuid.UUID = await db.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner) VALUES ($1, 'T', $2, $3)"
        " RETURNING id",
        agent,
        state,
        ALICE,
    )
    for n in range(count):
        await write(db, row, state, n)
    return agent, row


async def write(db: asyncpg.Connection, row: uuid.UUID, state: str = "working", n: int = 0) -> int:
    return await append_event(db, row, "task_updated", state, state, ALICE, {"n": n})


async def settle(db: asyncpg.Connection, row: uuid.UUID, state: str) -> None:
    await record_outcome(db, row, state=state, event="task_updated", actor=ALICE, data={})


@contextlib.asynccontextmanager
async def stream(
    client: Client, agent: uuid.UUID, query: str = "", headers: dict[str, str] | None = None
) -> AsyncIterator[tuple[aiohttp.ClientResponse, AsyncIterator[Event]]]:
    url = f"{client.base}/v1/a2a/{agent}/tasks/T/events{query}"
    hdrs = {"Authorization": f"Bearer {client.bearer}", **STREAM, **(headers or {})}
    async with client.session.get(url, headers=hdrs) as r:
        yield r, events(r)


async def take(received: AsyncIterator[Event], n: int, within_s: float = 20) -> list[Event]:
    async with asyncio.timeout(within_s):
        return [await anext(received) for _ in range(n)]


async def rest(received: AsyncIterator[Event], within_s: float = 20) -> list[Event]:
    async with asyncio.timeout(within_s):
        return [event async for event in received]


def seqs(got: list[Event]) -> list[int]:
    return [int(e.id or 0) for e in got]


# A gateway's listener connection: its last statement was its LISTEN or kept its interest rows.
LISTENER = (
    "datname = current_database()"
    " AND (query LIKE 'LISTEN%' OR query ~ '^(INSERT INTO|DELETE FROM) a2a_stream_interest ')"
)


async def listening(db: asyncpg.Connection, within_s: float = 20) -> None:
    """Wait until a gateway's listener connection LISTENs with interest in a task recorded."""
    async with asyncio.timeout(within_s):
        while True:
            if await db.fetchval(
                f"SELECT count(*) FROM pg_stat_activity WHERE {LISTENER}"
                " AND EXISTS (SELECT 1 FROM a2a_stream_interest)"
            ):
                return
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def open_once_slots_free(
    client: Client, agent: uuid.UUID, within_s: float = 20
) -> AsyncIterator[tuple[aiohttp.ClientResponse, AsyncIterator[Event]]]:
    """Open a stream, retrying while the gateway still counts streams whose client has gone.

    A closed client connection frees its slot only once the server notices the disconnect,
    which happens after the client's close returns: a caller honouring Retry-After gets in.
    """
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        async with stream(client, agent) as (r, received):
            if r.status != 503 or asyncio.get_running_loop().time() > deadline:
                yield r, received
                return
        await asyncio.sleep(0.05)


async def test_the_stream_replays_stored_events_then_follows_new_ones_live(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db, count=2)
    async with stream(live, agent) as (r, received):
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        replayed = await take(received, 2)
        await listening(db)
        await write(db, row, n=9)
        await settle(db, row, "completed")
        tail = await rest(received)
    assert seqs(replayed + tail) == [1, 2, 3, 4]
    first = replayed[0]
    assert first.event == "task_updated"
    body = first.json()
    assert set(body) == {"seq", "type", "previousState", "newState", "actor", "data", "createdAt"}
    assert (body["seq"], body["data"]) == (1, {"n": 0})
    assert tail[-1].json()["newState"] == "completed"


async def test_resuming_with_last_event_id_gives_no_gap_and_no_duplicate(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db, count=3)
    async with stream(live, agent) as (_, received):
        first = await take(received, 3)
    no_interest = "SELECT NOT EXISTS (SELECT 1 FROM a2a_stream_interest)"
    await eventually(lambda: db.fetchval(no_interest), "the first stream's interest was dropped")
    for n in range(3):
        await write(db, row, n=10 + n)
    headers = {"Last-Event-ID": first[-1].id or ""}
    async with stream(live, agent, "?after=1", headers) as (_, received):
        resumed = await take(received, 3)
        # Only a notification wakes this stream: write once its interest is recorded.
        await listening(db)
        await settle(db, row, "failed")
        resumed += await rest(received)
    assert seqs(first) + seqs(resumed) == list(range(1, 8))


async def test_the_stream_starts_after_the_after_parameter(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db, count=3)
    await settle(db, row, "completed")
    async with stream(live, agent, "?after=2") as (_, received):
        assert seqs(await rest(received)) == [3, 4]


async def test_until_interrupted_closes_at_input_required(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db)
    async with stream(live, agent, "?until=interrupted") as (_, received):
        await take(received, 1)
        await listening(db)
        await settle(db, row, "input-required")
        tail = await rest(received)
    assert [e.json()["newState"] for e in tail] == ["input-required"]


async def test_until_terminal_stays_open_through_input_required(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db)
    async with stream(live, agent) as (_, received):
        await take(received, 1)
        await listening(db)
        await settle(db, row, "input-required")
        assert (await take(received, 1))[0].json()["newState"] == "input-required"
        await settle(db, row, "working")
        await settle(db, row, "completed")
        tail = await rest(received)
    assert [e.json()["newState"] for e in tail] == ["working", "completed"]


async def test_a_stream_on_a_task_already_past_its_until_replays_and_closes(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db, count=2, state="input-required")
    async with stream(live, agent, "?until=interrupted&after=2") as (r, received):
        assert r.status == 200
        assert await rest(received) == []
    await settle(db, row, "canceled")
    async with stream(live, agent) as (_, received):
        assert seqs(await rest(received)) == [1, 2, 3]


async def test_an_invisible_task_is_404_before_any_stream(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, _ = await seed(db, visibility="public")
    bob = live.as_(token("bob@example.com"))
    async with stream(bob, agent) as (r, _):
        assert r.status == 404
        assert r.headers["Content-Type"] == "application/problem+json"
    async with stream(live, uuid.uuid4()) as (r, _):
        assert r.status == 404


@pytest.mark.parametrize(
    ("query", "headers", "loc"),
    [
        ("?until=never", {}, "$.query.until"),
        ("?after=-1", {}, "$.query.after"),
        ("", {"Last-Event-ID": "abc"}, "$.headers.Last-Event-ID"),
    ],
)
async def test_bad_stream_parameters_are_422(
    live: Client, db: asyncpg.Connection, query: str, headers: dict[str, str], loc: str
) -> None:
    agent, _ = await seed(db)
    async with stream(live, agent, query, headers) as (r, _):
        assert r.status == 422
        assert (await r.json(content_type=None))["errors"][0]["loc"] == loc


async def test_with_notify_disabled_events_still_arrive_through_the_fallback(
    settings: Settings, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db)
    async with (
        gateway(settings, listen=False, stream_poll_s=0.2) as client,
        stream(client, agent) as (_, received),
    ):
        await take(received, 1)
        await write(db, row, n=1)
        assert seqs(await take(received, 1)) == [2]
        await settle(db, row, "completed")
        assert seqs(await rest(received)) == [3]


async def test_a_lost_listener_connection_reconnects_and_streams_catch_up(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db)
    async with stream(live, agent) as (_, received):
        await take(received, 1)
        # The gateway connects its listener in the background: kill it once it listens.
        await listening(db)
        killed = await db.fetchval(
            f"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE {LISTENER}"
        )
        assert killed >= 1
        await write(db, row, n=1)
        assert seqs(await take(received, 1)) == [2]
        await settle(db, row, "completed")
        assert seqs(await rest(received)) == [3]


async def test_a_stream_closes_when_the_task_is_no_longer_visible(
    settings: Settings, db: asyncpg.Connection
) -> None:
    agent, _ = await seed(db)
    async with (
        gateway(settings, stream_poll_s=0.2) as client,
        stream(client, agent) as (_, received),
    ):
        await take(received, 1)
        await db.execute("UPDATE a2a_tasks SET owner = 'carol@example.com'")
        assert await rest(received) == []


async def test_a_quiet_stream_sends_keep_alive_comments(
    settings: Settings, db: asyncpg.Connection
) -> None:
    agent, _ = await seed(db)
    async with gateway(settings, keepalive_s=0.2) as client:
        url = f"{client.base}/v1/a2a/{agent}/tasks/T/events?after=1"
        headers = {"Authorization": f"Bearer {client.bearer}", **STREAM}
        async with client.session.get(url, headers=headers) as r:
            received = events(r, comments=True)
            assert (await take(received, 1))[0].comment == "keep-alive"


async def test_an_idle_stream_reads_nothing_through_the_hub_s_polls_and_its_keep_alives(
    settings: Settings, db: asyncpg.Connection
) -> None:
    agent, _ = await seed(db)
    reads: list[str] = []

    def on_query(record: Any) -> None:
        if record.query in (READ_EVENTS, READ_TASK_EVENTS):
            reads.append(record.query)

    async def polled() -> None:
        """Wait until the hub's connection runs its poll (it polls every 50 ms)."""
        await eventually(
            lambda: db.fetchval(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity"
                " WHERE datname = current_database() AND query = $1)",
                POLL,
            ),
            "the hub's poll",
        )

    changed = msgspec.structs.replace(settings, keepalive_s=0.2, stream_poll_s=0.05)
    app = create_app(changed, on_query=on_query)
    async with serve_asgi(app) as base, aiohttp.ClientSession() as http:
        client = Client(base, http)
        url = f"{client.base}/v1/a2a/{agent}/tasks/T/events?after=1"
        headers = {"Authorization": f"Bearer {client.bearer}", **STREAM}
        async with client.session.get(url, headers=headers) as r:
            received = events(r, comments=True)
            await eventually(
                lambda: db.fetchval("SELECT EXISTS (SELECT 1 FROM a2a_stream_interest)"),
                "the stream's interest recorded",
            )
            # Past its first reads (the opening one, and once its interest was recorded).
            await take(received, 2)
            before = len(reads)
            await polled()
            quiet = await take(received, 3)
            await polled()
            assert [e.comment for e in quiet] == ["keep-alive"] * 3
            assert reads[before:] == []


async def test_more_idle_streams_than_pool_connections_and_other_requests_are_still_served(
    settings: Settings, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db)
    async with gateway(settings, pool_size=2) as client, contextlib.AsyncExitStack() as stack:
        streams = [await stack.enter_async_context(stream(client, agent)) for _ in range(6)]
        for _, received in streams:
            await take(received, 1)
        r = await client.call("GET", f"/v1/a2a/{agent}/tasks/T")
        assert r.status == 200
        r = await client.call("GET", f"/v1/a2a/{agent}/tasks/T/events")
        assert [e["seq"] for e in r.json()["events"]] == [1]
        await settle(db, row, "completed")
        for _, received in streams:
            assert seqs(await rest(received)) == [2]


async def test_streams_over_the_limit_get_503_with_retry_after(
    settings: Settings, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db)
    async with gateway(settings, max_streams=2) as client:
        async with stream(client, agent) as (a, _), stream(client, agent) as (b, _):
            assert (a.status, b.status) == (200, 200)
            async with stream(client, agent) as (refused, _):
                assert refused.status == 503
                assert refused.headers["Retry-After"]
                body = await refused.json(content_type=None)
                assert body["type"] == "urn:a2a-continue:problem:too-many-streams"
        await settle(db, row, "completed")
        async with open_once_slots_free(client, agent) as (again, received):
            assert again.status == 200
            assert seqs(await rest(received)) == [1, 2]


async def test_without_the_accept_header_the_route_answers_the_json_page(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, _ = await seed(db, count=2)
    r = await live.call("GET", f"/v1/a2a/{agent}/tasks/T/events?after=1")
    assert r.headers["Content-Type"] == "application/json"
    assert r.json()["nextAfter"] == 2


async def test_an_event_written_by_another_gateway_process_reaches_a_stream_before_any_poll(
    live: Client,
    db: asyncpg.Connection,
    spawn_gateway: Callable[[], Awaitable[GatewayProcess]],
    session: aiohttp.ClientSession,
    fake_agent: Any,
) -> None:
    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        first = "taskId" not in request["params"]["message"]
        state = "TASK_STATE_INPUT_REQUIRED" if first else "TASK_STATE_COMPLETED"
        task = {"id": "T", "contextId": "C", "status": {"state": state}}
        return {"jsonrpc": "2.0", "id": request["id"], "result": {"task": task}}

    fake = await fake_agent(answer)
    other = Client((await spawn_gateway()).url, session)
    agent = await register(live, fake.url)
    assert (await live.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})).status == 200
    async with stream(live, uuid.UUID(agent)) as (_, received):
        await take(received, 1)
        await listening(db)
        r = await other.call("POST", f"/v1/a2a/{agent}/tasks/T/messages", {"text": "Paris"})
        assert r.status == 200
        # This gateway's first poll comes a minute after it started: an event within 20 s
        # came through its LISTEN connection (the bound leaves room for a busy machine).
        continued = await take(received, 1, within_s=20)
        assert (continued[0].event, continued[0].json()["newState"]) == (
            "task_continued",
            "completed",
        )
        assert await rest(received) == []


async def answers(client: Client, path: str) -> bool:
    return (await client.call("GET", path)).status == 200


async def test_a_stream_whose_database_goes_away_ends_and_resumes_where_it_stopped(
    settings: Settings, db: asyncpg.Connection, server_url: str
) -> None:
    agent, row = await seed(db)
    name = await db.fetchval("SELECT current_database()")
    admin = await asyncpg.connect(direct_url(server_url))
    try:
        async with gateway(settings, stream_poll_s=0.2) as client:
            async with stream(client, agent) as (_, received):
                first = await take(received, 1)
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                try:
                    await admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = $1 AND pid <> $2",
                        name,
                        db.get_server_pid(),
                    )
                    assert await rest(received) == []
                finally:
                    await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            await settle(db, row, "completed")
            # Back for the gateway too (a pooler between waits before it logs in again).
            await eventually(
                lambda: answers(client, f"/v1/a2a/{agent}/tasks/T"), "the task read again"
            )
            resume = {"Last-Event-ID": first[0].id or ""}
            async with stream(client, agent, headers=resume) as (_, received):
                assert seqs(await rest(received)) == [2]
    finally:
        await admin.close()


async def test_deleting_the_agent_closes_its_streams_at_once(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, _ = await seed(db)
    async with stream(live, agent) as (_, received):
        await take(received, 1)
        await listening(db)
        # The fallback poll of this gateway is a minute away: the deletion's notice ends it.
        r = await live.call("DELETE", f"/v1/a2a/agents/{agent}")
        assert r.status == 204
        assert await rest(received, within_s=10) == []


async def test_making_the_agent_private_closes_the_stream_of_a_caller_who_loses_sight(
    live: Client, db: asyncpg.Connection
) -> None:
    agent, _ = await seed(db, visibility="public")
    bob = Client(live.base, live.session, token("bob@example.com"))
    await db.execute("UPDATE a2a_tasks SET team_id = NULL, owner = $1", "bob@example.com")
    async with stream(bob, agent) as (_, received):
        await take(received, 1)
        await listening(db)
        r = await live.call("PATCH", f"/v1/a2a/agents/{agent}", {"visibility": "private"})
        assert r.status == 200, r.raw
        assert await rest(received, within_s=10) == []


async def test_an_event_whose_notification_was_lost_arrives_through_the_process_poll(
    settings: Settings, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db)
    async with (
        gateway(settings, stream_poll_s=0.2) as client,
        stream(client, agent) as (_, received),
    ):
        await take(received, 1)
        await listening(db)
        # Written as if no stream waited: no notification is sent.
        await db.execute("DELETE FROM a2a_stream_interest")
        await write(db, row, n=1)
        assert seqs(await take(received, 1)) == [2]


async def test_many_streams_of_one_task_share_one_read_of_a_new_event(
    settings: Settings, db: asyncpg.Connection
) -> None:
    agent, row = await seed(db)
    reads: list[str] = []

    def on_query(record: Any) -> None:
        if "e.seq > $2" in record.query:
            reads.append(record.query)

    app = create_app(msgspec.structs.replace(settings, stream_poll_s=60), on_query=on_query)
    async with serve_asgi(app) as base, aiohttp.ClientSession() as http:
        client = Client(base, http)
        async with contextlib.AsyncExitStack() as stack:
            streams = [await stack.enter_async_context(stream(client, agent)) for _ in range(5)]
            for _, received in streams:
                await take(received, 1)
            await listening(db)
            before = len(reads)
            await write(db, row, n=1)
            for _, received in streams:
                assert seqs(await take(received, 1)) == [2]
            # Five streams woken by one notification read the event together, not five times.
            assert 1 <= len(reads) - before < 5
