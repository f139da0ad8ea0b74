"""Watch leases (SPEC §8.4): one holder per live task, never together with a follow-up claim."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import msgspec

from a2a_continue.core.tasks import watches
from a2a_continue.core.tasks.claims import CLAIM_TASK
from a2a_continue.core.tasks.store import SYSTEM_ACTOR
from a2a_continue.core.watch import leases
from tests.support.agents import BUSY_TYPE, register_fake
from tests.support.client import Client, assert_problem, register
from tests.support.database import (
    TASKS_WITH_CLAIMS,
    direct_url,
    hold_claim,
    insert_agent,
    statement_cache,
)
from tests.support.fakes import SseAgent, StartFake, rpc_result
from tests.support.fakes import task_body as agent_task
from tests.support.streams import STREAMING, frame, post_stream, snapshot, status
from tests.support.waiting import eventually

LEASE_S = 5.0


async def connect(url: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(url, statement_cache_size=statement_cache())
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name,
            encoder=lambda v: msgspec.json.encode(v).decode(),
            decoder=msgspec.json.decode,
            schema="pg_catalog",
        )
    return conn


async def add_task(
    db: asyncpg.Connection, agent_id: uuid.UUID, task_id: str, state: str = "working", **cols: Any
) -> uuid.UUID:
    """Insert a task with ``cols`` given as SQL expressions (e.g. ``"now() + interval '1 h'"``)."""
    names = ["agent_id", "task_id", "state", "owner", *cols]
    values = ["$1", "$2", "$3", "'alice@example.com'", *cols.values()]
    row_id: uuid.UUID = await db.fetchval(
        f"INSERT INTO a2a_tasks ({', '.join(names)}) VALUES ({', '.join(values)}) RETURNING id",
        agent_id,
        task_id,
        state,
    )
    return row_id


LIVE_LEASE = {"watch_token": "gen_random_uuid()", "watch_expires_at": "now() + interval '1 h'"}
DEAD_LEASE = {"watch_token": "gen_random_uuid()", "watch_expires_at": "now() - interval '1 s'"}
# A claim of the previous release, on the task row.
ROW_CLAIM = {"claim_token": "gen_random_uuid()", "claim_expires_at": "now() + interval '1 h'"}
PAST = {"watch_past": """'{"state": "input-required"}'"""}


async def test_pick_up_takes_only_live_tasks_that_nobody_holds(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    await add_task(db, agent, "working")
    await add_task(db, agent, "submitted", "submitted")
    await add_task(db, agent, "waiting-past-answer", "input-required", **PAST)
    await add_task(db, agent, "expired-lease", **DEAD_LEASE)
    await add_task(db, agent, "interrupted", "input-required")
    await add_task(db, agent, "terminal-with-past", "completed", **PAST)
    await add_task(db, agent, "unknown", "unknown")
    await add_task(db, agent, "leased", **LIVE_LEASE)
    await add_task(db, agent, "claimed")
    await hold_claim(db, task_id="claimed")
    await add_task(db, agent, "claimed-on-the-row", **ROW_CLAIM)
    await add_task(db, agent, "expired-claim")
    await hold_claim(db, "-1 second", task_id="expired-claim")
    await add_task(db, agent, "given-up", watch_failed_at="now()")

    rows = await watches.pick_up_watches(db, 100, LEASE_S)

    assert {r["task_id"] for r in rows} == {
        "working",
        "submitted",
        "waiting-past-answer",
        "expired-lease",
        "expired-claim",
    }
    held = await db.fetch(
        "SELECT task_id, watch_token, extract(epoch FROM watch_expires_at - now()) AS left_s"
        " FROM a2a_tasks WHERE task_id = ANY($1)",
        [r["task_id"] for r in rows],
    )
    assert {r["watch_token"] for r in held} == {r["watch_token"] for r in rows}
    assert len({r["watch_token"] for r in held}) == 5
    assert all(0 < r["left_s"] <= LEASE_S for r in held)
    assert await watches.pick_up_watches(db, 100, LEASE_S) == []


async def test_pick_up_takes_no_more_than_asked(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    for n in range(5):
        await add_task(db, agent, f"t{n}")

    assert len(await watches.pick_up_watches(db, 2, LEASE_S)) == 2
    assert len(await watches.pick_up_watches(db, 10, LEASE_S)) == 3


async def test_concurrent_pick_ups_never_take_one_task_twice(
    db: asyncpg.Connection, database_url: str
) -> None:
    agent = await insert_agent(db)
    for n in range(40):
        await add_task(db, agent, f"t{n}")
    conns = [await connect(database_url) for _ in range(4)]
    try:
        picked = await asyncio.gather(*(watches.pick_up_watches(c, 40, LEASE_S) for c in conns))
    finally:
        for conn in conns:
            await conn.close()

    ids = [r["task_id"] for rows in picked for r in rows]
    assert sorted(ids) == sorted(f"t{n}" for n in range(40))


async def test_pick_up_of_an_expired_lease_keeps_the_watch_clock(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    await add_task(db, agent, "t1", watch_started_at="now() - interval '1 h'", **DEAD_LEASE)

    [row] = await watches.pick_up_watches(db, 10, LEASE_S)

    assert 3599 < row["watched_s"] < 3700


async def test_renew_extends_only_the_leases_still_held(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    await add_task(db, agent, "mine")
    await add_task(db, agent, "taken-over")
    rows = {r["task_id"]: r for r in await watches.pick_up_watches(db, 10, LEASE_S)}
    await db.execute(
        "UPDATE a2a_tasks SET watch_token = gen_random_uuid() WHERE task_id = 'taken-over'"
    )
    held = {r["row_id"]: r["watch_token"] for r in rows.values()}

    kept = await leases.renew(db, held, 60.0)

    assert kept == {rows["mine"]["row_id"]: False}
    left = await db.fetchval(
        "SELECT extract(epoch FROM watch_expires_at - now()) FROM a2a_tasks WHERE task_id = 'mine'"
    )
    assert LEASE_S < left <= 60


async def test_renew_says_which_held_tasks_are_settled_as_stored(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    asked = """'{"messageId": "m1", "parts": []}'"""
    past = """'{"state": "input-required", "timestamp": "t", "message": "m1"}'"""
    cases = {
        "working": ("working", {}, False),
        "canceled": ("canceled", {}, True),
        "asking": ("input-required", {}, True),
        "still-the-answer": (
            "input-required",
            {"status_message": asked, "watch_past": past},
            False,
        ),
        "asking-anew": ("input-required", {"watch_past": past}, True),
    }
    held = {}
    for task_id, (state, cols, _) in cases.items():
        row_id = await add_task(db, agent, task_id, state, **LIVE_LEASE, **cols)
        held[row_id] = await db.fetchval("SELECT watch_token FROM a2a_tasks WHERE id = $1", row_id)

    kept = await leases.renew(db, held, 60.0)

    names = dict(await db.fetch("SELECT id, task_id FROM a2a_tasks"))
    assert {names[row_id]: done for row_id, done in kept.items()} == {
        task_id: done for task_id, (_, _, done) in cases.items()
    }


async def test_released_lease_is_picked_up_at_once_with_its_clock(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    await add_task(db, agent, "t1")
    [row] = await watches.pick_up_watches(db, 10, LEASE_S)

    await watches.release_watches(db, {row["row_id"]: row["watch_token"]})

    lease = await db.fetchrow("SELECT watch_token, watch_started_at FROM a2a_tasks")
    assert lease is not None
    assert lease["watch_token"] is None and lease["watch_started_at"] is not None
    [again] = await watches.pick_up_watches(db, 10, LEASE_S)
    assert again["watch_token"] != row["watch_token"]


async def test_give_up_logs_watch_failed_and_keeps_the_state(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    row_id = await add_task(db, agent, "t1")
    await db.execute("UPDATE a2a_tasks SET last_seq = 1 WHERE id = $1", row_id)
    [row] = await watches.pick_up_watches(db, 10, LEASE_S)

    assert not await watches.give_up_watch(
        db, row_id, uuid.uuid4(), "a2a-continue", {"reason": "x"}
    )
    assert await watches.give_up_watch(
        db, row_id, row["watch_token"], "a2a-continue", {"reason": "x"}
    )

    event = await db.fetchrow("SELECT * FROM a2a_task_events WHERE task = $1", row_id)
    assert event is not None
    assert (event["seq"], event["type"], event["previous_state"], event["new_state"]) == (
        2,
        "task_watch_failed",
        "working",
        "working",
    )
    assert event["data"] == {"reason": "x"}
    task = await db.fetchrow("SELECT * FROM a2a_tasks WHERE id = $1", row_id)
    assert task is not None
    assert (task["state"], task["last_seq"], task["watch_token"]) == ("working", 2, None)
    assert task["watch_failed_at"] is not None


async def test_hand_over_leases_a_free_task_and_records_the_status_to_wait_past(
    db: asyncpg.Connection,
) -> None:
    agent = await insert_agent(db)
    await add_task(db, agent, "t1", "input-required", watch_failed_at="now()")
    token = uuid.uuid4()
    past = {"state": "input-required", "timestamp": None, "message": "m1"}

    row = await watches.hand_over_watch(db, agent, "t1", past, token, LEASE_S)

    assert row is not None
    assert (row["watch_token"], row["watch_past"], row["watched_s"]) == (token, past, 0)
    failed = await db.fetchval("SELECT watch_failed_at FROM a2a_tasks")
    assert failed is None


async def test_hand_over_never_leases_a_claimed_task(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    await add_task(db, agent, "t1")
    await hold_claim(db, task_id="t1")
    await add_task(db, agent, "t2", **ROW_CLAIM)

    for task in ("t1", "t2"):
        row = await watches.hand_over_watch(db, agent, task, None, uuid.uuid4(), LEASE_S)
        assert row is not None and row["watch_token"] is None


async def test_a_hand_over_that_waited_on_a_claimer_sees_the_claim_it_committed(
    db: asyncpg.Connection, database_url: str
) -> None:
    agent = await insert_agent(db)
    await add_task(db, agent, "t1")
    claimer = await asyncpg.connect(direct_url(database_url))
    try:
        claiming = claimer.transaction()
        await claiming.start()
        claim = await claimer.fetchrow(
            CLAIM_TASK, "alice@example.com", [], True, agent, "t1", uuid.uuid4(), None, 30.0,
            5.0, SYSTEM_ACTOR,
        )  # fmt: skip
        assert claim is not None and claim["claimed"]
        other = await connect(database_url)
        try:
            handing = asyncio.create_task(
                watches.hand_over_watch(other, agent, "t1", None, uuid.uuid4(), LEASE_S)
            )

            async def waiting() -> bool:
                found = await db.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND query LIKE '%watch_past = $3%'"
                )
                return bool(found)

            await eventually(waiting, "the hand-over waits on the claimer's row lock")
            await claiming.commit()
            row = await handing
        finally:
            await other.close()
    finally:
        await claimer.close()

    assert row is not None and row["watch_token"] is None


async def test_hand_over_skips_tasks_that_need_no_watch(db: asyncpg.Connection) -> None:
    agent = await insert_agent(db)
    await add_task(db, agent, "done", "completed")
    await add_task(db, agent, "asking", "input-required")
    past = {"state": "completed"}

    assert await watches.hand_over_watch(db, agent, "done", past, uuid.uuid4(), LEASE_S) is None
    assert await watches.hand_over_watch(db, agent, "asking", None, uuid.uuid4(), LEASE_S) is None
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks WHERE watch_token IS NULL") == 2


async def test_follow_up_is_refused_under_a_live_watch_lease_and_allowed_once_it_expired(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    async def weather(request: dict[str, Any]) -> dict[str, Any]:
        state = "completed" if "taskId" in request["params"]["message"] else "input-required"
        return rpc_result(request, agent_task("1.0", "T1", state, "C1"))

    agent = await register_fake(client, fake_agent, weather)
    await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "weather?"})
    await db.execute(
        "UPDATE a2a_tasks SET watch_token = gen_random_uuid(),"
        " watch_expires_at = now() + interval '1 h'"
    )

    busy = await client.call("POST", agent.messages("T1"), {"text": "Paris"})

    problem = assert_problem(busy, 409)
    assert problem["type"] == BUSY_TYPE
    assert "still working" in problem["detail"]
    assert len(agent.received) == 1
    await db.execute("UPDATE a2a_tasks SET watch_expires_at = now() - interval '1 s'")
    r = await client.call("POST", agent.messages("T1"), {"text": "Paris"})
    assert r.status == 200, r.raw
    assert r.headers["A2A-Task-State"] == "completed"


async def open_streamed_start(
    client: Client, sse_agent: Any, db: asyncpg.Connection, go: asyncio.Event
) -> tuple[SseAgent, str, asyncio.Task[Any]]:
    """Start task T with a stream that sends `working`, then stays open until ``go`` is set
    (after which the agent closes it, T still working); a SubscribeToTask completes T."""

    async def script(request: dict[str, Any], send: Any) -> None:
        if request["method"] == "SendStreamingMessage":
            await send(frame(request, snapshot("T", "TASK_STATE_WORKING")))
            await go.wait()
            return
        await send(frame(request, status("T", "TASK_STATE_COMPLETED")))

    fake = await sse_agent(script)
    agent = await register(client, fake.url, "1.0", capabilities=STREAMING)
    body = {"text": "hi"}
    streaming = asyncio.create_task(post_stream(client, f"/v1/a2a/{agent}/messages", body))

    async def created() -> bool:
        return await db.fetchval("SELECT count(*) FROM a2a_tasks WHERE task_id = 'T'") == 1

    await eventually(created)
    return fake, agent, streaming


async def test_a_streamed_start_holds_its_task_against_the_watcher_until_the_stream_ends(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    go = asyncio.Event()
    try:
        fake, _, streaming = await open_streamed_start(client, sse_agent, db, go)

        picked = await watches.pick_up_watches(db, 100, LEASE_S)

        held = await db.fetchrow(
            f"SELECT watch_token, token AS claim_token FROM {TASKS_WITH_CLAIMS}"
        )
        assert picked == []
        assert held["watch_token"] is None and held["claim_token"] is not None
        assert [r["method"] for r in fake.received] == ["SendStreamingMessage"]
    finally:
        go.set()
    r = await streaming
    assert (r.status, [e.event for e in r.events]) == (200, ["task"])

    async def completed() -> bool:
        return await db.fetchval("SELECT state FROM a2a_tasks") == "completed"

    await eventually(completed)
    assert [r["method"] for r in fake.received] == ["SendStreamingMessage", "SubscribeToTask"]
    row = await db.fetchrow(f"SELECT watch_token, token AS claim_token FROM {TASKS_WITH_CLAIMS}")
    assert row["claim_token"] is None


async def test_a_follow_up_during_a_streamed_start_is_409_task_busy(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    go = asyncio.Event()
    try:
        fake, agent, streaming = await open_streamed_start(client, sse_agent, db, go)

        busy = await client.call("POST", f"/v1/a2a/{agent}/tasks/T/messages", {"text": "x"})

        assert assert_problem(busy, 409)["type"] == BUSY_TYPE
        assert len(fake.received) == 1
    finally:
        go.set()
    assert (await streaming).status == 200
