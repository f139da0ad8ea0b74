"""GET /metrics: the permission it needs, and the series moving with traffic."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg

from a2a_continue.app import create_app
from a2a_continue.settings import Settings
from tests.support.agents import register, register_fake, start
from tests.support.client import Client, token
from tests.support.client import register as register_url
from tests.support.database import hold_claim
from tests.support.fakes import StartFake, WeatherFake, rpc_error, rpc_result, task_body
from tests.support.metrics import moved, scrape
from tests.support.ports import dead_url
from tests.support.servers import serve_asgi
from tests.support.streams import STREAMING, frame, interrupted_then, post_stream, status
from tests.support.watching import fast, settles_as, watch_ended

JSON = dict[str, Any]
Send = Callable[[bytes], Awaitable[None]]

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
    await hold_claim(db)
    before = await scrape(client)
    assert (await client.call("POST", agent.messages(task["id"]), {"text": "x"})).status == 409
    after = await scrape(client)
    assert moved(before, after, "a2ac_followups_total", outcome="busy") == 1


async def test_an_expired_claim_taken_over_is_counted(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    task = await start(client, agent)
    await hold_claim(db, "-1 second")
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


def streamed_calls(method: str, outcome: str) -> dict[str, str]:
    return {"method": method, "outcome": outcome}


async def test_a_streamed_follow_up_counts_as_continued_with_one_streaming_call(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Send) -> None:
        await send(frame(request, status("T", "TASK_STATE_WORKING")))
        await send(frame(request, status("T", "TASK_STATE_COMPLETED")))

    agent = await register_url(
        client, (await sse_agent(interrupted_then(rest))).url, capabilities=STREAMING
    )
    assert (await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})).status == 200
    before = await scrape(client)
    r = await post_stream(client, f"/v1/a2a/{agent}/tasks/T/messages", {"text": "Paris"})
    assert [e.event for e in r.events] == ["status-update", "status-update"]
    after = await scrape(client)

    assert moved(before, after, "a2ac_followups_total", outcome="continued") == 1
    calls = streamed_calls("SendStreamingMessage", "ok")
    assert moved(before, after, "a2ac_agent_calls_total", **calls) == 1
    duration = {"method": "SendStreamingMessage"}
    assert moved(before, after, "a2ac_agent_call_duration_seconds_count", **duration) == 1


async def test_a_streamed_follow_up_failing_before_any_frame_counts_as_failed(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Send) -> None:
        await asyncio.sleep(1)

    fake = await sse_agent(interrupted_then(rest))
    agent = await register_url(client, fake.url, capabilities=STREAMING, timeoutSeconds=0.3)
    assert (await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})).status == 200
    before = await scrape(client)
    r = await post_stream(client, f"/v1/a2a/{agent}/tasks/T/messages", {"text": "Paris"})
    assert r.status == 504
    after = await scrape(client)

    assert moved(before, after, "a2ac_followups_total", outcome="failed") == 1
    assert moved(before, after, "a2ac_followups_total", outcome="continued") == 0
    calls = streamed_calls("SendStreamingMessage", "timeout")
    assert moved(before, after, "a2ac_agent_calls_total", **calls) == 1


async def test_a_stream_broken_after_its_first_frame_counts_one_continued_follow_up(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Send) -> None:
        await send(frame(request, status("T", "TASK_STATE_WORKING")))
        await send(b"not json")

    agent = await register_url(
        client, (await sse_agent(interrupted_then(rest))).url, capabilities=STREAMING
    )
    assert (await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})).status == 200
    before = await scrape(client)
    r = await post_stream(client, f"/v1/a2a/{agent}/tasks/T/messages", {"text": "Paris"})
    assert [e.event for e in r.events] == ["status-update", "error"]
    after = await scrape(client)

    assert moved(before, after, "a2ac_followups_total", outcome="continued") == 1
    assert moved(before, after, "a2ac_followups_total", outcome="failed") == 0
    calls = streamed_calls("SendStreamingMessage", "bad-answer")
    assert moved(before, after, "a2ac_agent_calls_total", **calls) == 1


async def test_streamed_follow_ups_refused_count_as_busy_or_terminal(
    client: Client, db: asyncpg.Connection, sse_agent: Any
) -> None:
    async def rest(request: JSON, send: Send) -> None:
        await send(frame(request, status("T", "TASK_STATE_COMPLETED")))

    agent = await register_url(
        client, (await sse_agent(interrupted_then(rest))).url, capabilities=STREAMING
    )
    assert (await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})).status == 200
    path = f"/v1/a2a/{agent}/tasks/T/messages"
    await hold_claim(db)
    before = await scrape(client)
    assert (await post_stream(client, path, {"text": "x"})).status == 409
    await db.execute("DELETE FROM a2a_claims")
    assert (await post_stream(client, path, {"text": "x"})).status == 200
    assert (await post_stream(client, path, {"text": "x"})).status == 409
    after = await scrape(client)

    assert moved(before, after, "a2ac_followups_total", outcome="busy") == 1
    assert moved(before, after, "a2ac_followups_total", outcome="continued") == 1
    assert moved(before, after, "a2ac_followups_total", outcome="terminal") == 1


async def test_the_watchers_subscription_is_counted_as_an_agent_call(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    asked = {"id": "T1", "contextId": "C1", "status": {"state": "input-required"}}

    async def refuses_streams(request: JSON) -> JSON:
        if request["method"] == "tasks/resubscribe":
            return rpc_error(request, -32001, "Task not running")
        if request["method"] == "tasks/get":
            return rpc_result(request, {"kind": "task", **asked})
        return rpc_result(request, task_body("0.3", "T1", "working", "C1"))

    async with serve_asgi(create_app(fast(settings))) as base, aiohttp.ClientSession() as http:
        client = Client(base, http)
        agent = await register_fake(
            client, fake_agent, refuses_streams, "0.3", capabilities=STREAMING
        )
        before = await scrape(client)
        assert (await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": "go"})).status
        await settles_as(client, agent, "T1", "input-required")
        await watch_ended(db, "T1")
        after = await scrape(client)

    assert [r["method"] for r in agent.received][:2] == ["message/send", "tasks/resubscribe"]
    calls = streamed_calls("tasks/resubscribe", "rpc-error")
    assert moved(before, after, "a2ac_agent_calls_total", **calls) == 1
    duration = {"method": "tasks/resubscribe"}
    assert moved(before, after, "a2ac_agent_call_duration_seconds_count", **duration) == 1
