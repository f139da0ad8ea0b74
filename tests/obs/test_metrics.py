"""GET /metrics: the permission it needs, and the series moving with traffic."""

from __future__ import annotations

import asyncpg

from tests.support.agents import register, register_fake, start
from tests.support.client import Client, token
from tests.support.fakes import StartFake, WeatherFake
from tests.support.metrics import moved, scrape
from tests.support.ports import dead_url

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

FOLLOW_UP_ROUTE = "/v1/a2a/{agent_id}/tasks/{task_id}/messages"


async def test_metrics_needs_the_metrics_permission(client: Client) -> None:
    assert (await client.call("GET", "/metrics", bearer=None)).status == 401
    reader = token(perms=["a2a.read", "a2a.invoke", "a2a.create"])
    r = await client.call("GET", "/metrics", bearer=reader)
    assert r.status == 403
    assert "a2a.metrics" in r.json()["detail"]
    r = await client.call("GET", "/metrics", bearer=token("prometheus", ["a2a.metrics"]))
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    assert b"a2ac_http_requests_total" in r.raw


async def test_request_agent_call_and_follow_up_series_move_with_a_follow_up(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    before = await scrape(client)
    r = await client.call("POST", agent.messages(task["id"]), {"text": "Paris"})
    assert r.status == 200, r.raw
    after = await scrape(client)

    route = {"route": FOLLOW_UP_ROUTE}
    assert (
        moved(before, after, "a2ac_http_requests_total", **route, method="POST", status="200") == 1
    )
    assert moved(before, after, "a2ac_http_request_duration_seconds_count", **route) == 1
    assert moved(before, after, "a2ac_followups_total", outcome="continued") == 1
    calls = {"method": "SendMessage"}
    assert moved(before, after, "a2ac_agent_calls_total", **calls, outcome="ok") == 1
    assert moved(before, after, "a2ac_agent_call_duration_seconds_count", **calls) == 1


async def test_refused_and_failed_follow_ups_are_counted_by_outcome(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    done = await start(client, agent, "now")
    task = await start(client, agent)
    before = await scrape(client)
    assert (await client.call("POST", agent.messages(done["id"]), {"text": "x"})).status == 409
    await db.execute("UPDATE a2a_agents SET endpoint_url = $1", dead_url())
    assert (await client.call("POST", agent.messages(task["id"]), {"text": "x"})).status == 502
    after = await scrape(client)

    assert moved(before, after, "a2ac_followups_total", outcome="terminal") == 1
    assert moved(before, after, "a2ac_followups_total", outcome="failed") == 1
    calls = {"method": "SendMessage", "outcome": "unreachable"}
    assert moved(before, after, "a2ac_agent_calls_total", **calls) == 1
    status = {"route": FOLLOW_UP_ROUTE, "method": "POST"}
    assert moved(before, after, "a2ac_http_requests_total", **status, status="409") == 1
    assert moved(before, after, "a2ac_http_requests_total", **status, status="502") == 1


async def test_a_busy_follow_up_is_counted(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    await db.execute(
        "UPDATE a2a_tasks SET claim_token = gen_random_uuid(),"
        " claim_expires_at = now() + interval '1 hour'"
    )
    before = await scrape(client)
    assert (await client.call("POST", agent.messages(task["id"]), {"text": "x"})).status == 409
    after = await scrape(client)
    assert moved(before, after, "a2ac_followups_total", outcome="busy") == 1


async def test_an_expired_claim_taken_over_is_counted(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    await db.execute(
        "UPDATE a2a_tasks SET claim_token = gen_random_uuid(),"
        " claim_expires_at = now() - interval '1 second'"
    )
    before = await scrape(client)
    assert (await client.call("POST", agent.messages(task["id"]), {"text": "x"})).status == 200
    after = await scrape(client)
    assert moved(before, after, "a2ac_claims_expired_total") == 1


async def test_unmatched_paths_share_one_route_label_and_no_label_names_a_task_or_caller(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    await client.call("POST", agent.messages(task["id"]), {"text": "Paris"})
    await client.call("GET", "/no/such/path-xyz")
    text = (await client.call("GET", "/metrics", bearer=token("p", ["a2a.metrics"]))).raw
    assert task["id"].encode() not in text
    assert agent.id.encode() not in text
    assert b"alice@example.com" not in text
    assert b"path-xyz" not in text
    assert b'route="unmatched"' in text


async def test_pool_gauges_report_idle_and_in_use_connections(client: Client) -> None:
    await client.call("GET", "/readyz")
    samples = await scrape(client)
    states = {
        dict(labels)["state"] for name, labels in samples if name == "a2ac_db_pool_connections"
    }
    assert states == {"idle", "in_use"}


async def test_every_series_of_the_specification_is_exposed(client: Client) -> None:
    names = {name for name, _ in await scrape(client)}
    for series in (
        "a2ac_http_requests_total",
        "a2ac_http_request_duration_seconds_bucket",
        "a2ac_claims_expired_total",
        "a2ac_sse_streams",
        "a2ac_watched_tasks",
        "a2ac_idempotent_replays_total",
    ):
        assert series in names, series


async def test_a_request_is_counted_under_its_route_template(client: Client) -> None:
    before = await scrape(client)
    await register(client, dead_url(), "1.0", [])
    after = await scrape(client)
    labels = {"route": "/v1/a2a/agents", "method": "POST", "status": "201"}
    assert moved(before, after, "a2ac_http_requests_total", **labels) == 1


async def test_an_open_event_stream_moves_the_streams_gauge(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    before = await scrape(client)
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {client.bearer}"}
    url = client.base + agent.task(task["id"]) + "/events"
    async with client.session.get(url, headers=headers) as stream:
        assert stream.status == 200
        await stream.content.readline()  # the stream has begun
        during = await scrape(client)
    assert moved(before, during, "a2ac_sse_streams") == 1
