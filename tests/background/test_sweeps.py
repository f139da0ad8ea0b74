"""A follow-up whose holder died: its expired claim is put on the record when found, by
the next claimer or by the periodic sweep."""

from __future__ import annotations

import aiohttp
import asyncpg
import msgspec

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.client import Client, register
from tests.support.database import hold_claim
from tests.support.fakes import FakeAgent, Scripted, StartFake
from tests.support.servers import serve_asgi
from tests.support.waiting import eventually


async def task_with_a_dead_claim(client: Client, db: asyncpg.Connection, fake: FakeAgent) -> str:
    """Start T1, then leave a claim on it as a holder that died would (already expired)."""
    agent = await register(client, fake.url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    await hold_claim(db, "-1 second")
    return agent


async def logged(client: Client, agent: str) -> list[dict[str, object]]:
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks/T1/events")
    assert r.status == 200, r.raw
    events: list[dict[str, object]] = r.json()["events"]
    return events


async def test_next_claimer_logs_the_expired_claim_as_a_failed_follow_up(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await task_with_a_dead_claim(client, db, await fake_agent(Scripted()))

    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "Paris"})

    assert r.status == 200, r.raw
    events = await logged(client, agent)
    assert [(e["seq"], e["type"]) for e in events] == [
        (1, "task_created"),
        (2, "task_continue_failed"),
        (3, "task_continued"),
    ]
    expired = events[1]
    assert expired["previousState"] == expired["newState"] == "input-required"
    assert expired["actor"] == "a2a-continue"
    assert isinstance(expired["data"], dict)
    assert expired["data"]["reason"] == "claim-expired"
    assert "claimExpiredAt" in expired["data"]


async def test_a_live_claim_is_not_logged_as_expired(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await task_with_a_dead_claim(client, db, await fake_agent(Scripted()))
    await hold_claim(db, "1 hour")

    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": "Paris"})

    assert r.status == 409, r.raw
    assert [e["type"] for e in await logged(client, agent)] == ["task_created"]


async def test_the_periodic_sweep_logs_and_releases_expired_claims(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(Scripted())
    sweeping = msgspec.structs.replace(settings, claim_sweep_s=0.1)
    async with serve_asgi(create_app(sweeping)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        agent = await task_with_a_dead_claim(client, db, fake)

        async def released() -> bool:
            return await db.fetchval("SELECT count(*) FROM a2a_claims") == 0

        await eventually(released, "the sweep released the claim")
        events = await logged(client, agent)
    assert await db.fetchval("SELECT count(*) FROM a2a_claims") == 0
    assert [(e["seq"], e["type"]) for e in events] == [
        (1, "task_created"),
        (2, "task_continue_failed"),
    ]
    assert isinstance(events[1]["data"], dict)
    assert events[1]["data"]["reason"] == "claim-expired"
    assert await db.fetchval("SELECT last_seq FROM a2a_tasks") == 2
