"""The push dispatcher: what each delivery carries, retries, order, dead, redeliver, 410."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import jwt
import pytest
from aiohttp import web

from a2a_continue.app import create_app
from a2a_continue.background.push import retry_after_s
from a2a_continue.core.push.configs import sealed_context
from a2a_continue.runtime.secrets import Sealer, decode_key
from a2a_continue.settings import Settings, parse_networks
from tests.support.client import Client, register
from tests.support.fakes import Scripted, StartFake, task_v10
from tests.support.metrics import moved, scrape
from tests.support.push import add_config, deliveries, fast_push, start_task
from tests.support.receiver import Receiver, push_receiver
from tests.support.servers import serve_aiohttp, serve_asgi
from tests.support.sockets import Sockets
from tests.support.spellings import FULLWIDTH_LOOPBACK, STORED_SPELLINGS
from tests.support.waiting import eventually

JSON = dict[str, Any]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with push_receiver() as opened:
        yield opened


@pytest.fixture
async def push_client(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    """A client of a gateway that dispatches with short retries."""
    app = create_app(fast_push(settings))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


def turns(*answers: JSON) -> Scripted:
    """A 1.0 agent starting T1 in input-required, answering follow-ups with ``answers``."""
    left = list(answers)
    return Scripted(
        start=lambda r: task_v10("T1", "input-required", text="Which city?"),
        follow_up=lambda r: left.pop(0) if len(left) > 1 else left[0],
    )


async def follow_up(client: Client, agent: str, text: str = "Paris") -> None:
    r = await client.call("POST", f"/v1/a2a/{agent}/tasks/T1/messages", {"text": text})
    assert r.status == 200, r.raw


async def setup(
    client: Client, fake_agent: StartFake, receiver: Receiver, *answers: JSON, **config: Any
) -> tuple[str, JSON]:
    fake = await fake_agent(turns(*answers))
    agent = await register(client, fake.url)
    await start_task(client, agent)
    return agent, await add_config(client, agent, "T1", url=receiver.url, **config)


async def test_a_1_0_config_gets_the_task_first_then_status_and_artifact_updates(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    answers = (task_v10("T1", "input-required", text="Which day?"), task_v10("T1", "completed"))
    agent, _ = await setup(push_client, fake_agent, receiver, *answers)
    await follow_up(push_client, agent)
    await follow_up(push_client, agent, "Monday")
    await eventually(lambda: len(receiver.ok()) == 3, "three deliveries")
    first, status, artifact = (d.body for d in receiver.ok())
    assert first["task"]["id"] == "T1" and first["task"]["contextId"] == "C1"
    assert first["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert first["task"]["status"]["message"]["parts"] == [{"text": "Which day?"}]
    assert status["statusUpdate"]["taskId"] == "T1"
    assert status["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert artifact["artifactUpdate"]["artifact"]["artifactId"] == "a1"
    assert len(set(receiver.ids())) == 3


async def test_a_1_0_delivery_carries_its_headers(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    auth = {"scheme": "Basic", "credentials": "dXNlcjpwYXNz"}
    agent, _ = await setup(
        push_client, fake_agent, receiver, task_v10("T1", "completed"), token="tok-1",
        authentication=auth,
    )  # fmt: skip
    await follow_up(push_client, agent)
    (got,) = await eventually(lambda: receiver.ok() or None, "a delivery")
    assert got.headers["Content-Type"] == "application/a2a+json"
    assert got.headers["A2A-Version"] == "1.0"
    assert got.headers["X-A2A-Notification-Token"] == "tok-1"
    assert got.headers["Authorization"] == "Basic dXNlcjpwYXNz"
    assert len(got.delivery_id) == 36


async def test_a_0_3_config_gets_the_whole_task_as_json(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    agent, _ = await setup(
        push_client, fake_agent, receiver, task_v10("T1", "completed"), version="0.3"
    )
    await follow_up(push_client, agent)
    (got,) = await eventually(lambda: receiver.ok() or None, "a delivery")
    assert got.headers["Content-Type"] == "application/json"
    assert "A2A-Version" not in got.headers
    task = got.body
    assert task["kind"] == "task" and task["id"] == "T1" and task["contextId"] == "C1"
    assert task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "ok"}]


async def test_the_gateway_jwt_verifies_against_the_jwks_route(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    agent, _ = await setup(
        push_client, fake_agent, receiver, task_v10("T1", "completed"),
        authentication={"scheme": "Bearer"},
    )  # fmt: skip
    await follow_up(push_client, agent)
    (got,) = await eventually(lambda: receiver.ok() or None, "a delivery")
    scheme, _, signed = got.headers["Authorization"].partition(" ")
    assert scheme == "Bearer"
    keys = jwt.PyJWKClient(push_client.base + "/.well-known/jwks.json")
    key = await asyncio.to_thread(keys.get_signing_key_from_jwt, signed)
    claims = jwt.decode(signed, key, algorithms=["ES256", "RS256"], audience=receiver.url)
    assert claims["jti"] == got.delivery_id
    assert claims["taskId"] == "T1"
    assert claims["request_body_sha256"] == hashlib.sha256(got.raw).hexdigest()
    assert claims["exp"] - claims["iat"] == 300


async def test_a_failed_delivery_is_retried_under_the_same_id(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    receiver.answers = [500, 503]
    agent, config = await setup(push_client, fake_agent, receiver, task_v10("T1", "completed"))
    await follow_up(push_client, agent)
    await eventually(lambda: receiver.ok() or None, "a delivery that succeeded")
    assert [d.status for d in receiver.got] == [500, 503, 200]
    assert len({d.delivery_id for d in receiver.got}) == 1

    async def settled() -> JSON | None:
        (row,) = await deliveries(push_client, agent, "T1", config["id"])
        return row if row["state"] == "delivered" else None

    row = await eventually(settled, "the delivery recorded as delivered")
    assert row["attempts"] == 3 and row["lastStatus"] == 200
    assert row["id"] == receiver.got[0].delivery_id


async def test_a_later_delivery_waits_behind_a_failing_one(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    receiver.answers = [500, 500]
    answers = (task_v10("T1", "input-required", text="Which day?"), task_v10("T1", "completed"))
    agent, _ = await setup(push_client, fake_agent, receiver, *answers)
    await follow_up(push_client, agent)
    await follow_up(push_client, agent, "Monday")
    await eventually(lambda: len(receiver.ok()) == 3, "three deliveries")
    first = receiver.got[0].delivery_id
    order = [d.delivery_id for d in receiver.got]
    assert order[:3] == [first, first, first]
    assert first not in order[3:]


async def test_a_delivery_is_dead_after_the_last_attempt_and_the_next_goes_on(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    receiver.answers = [500, 500, 500]  # A2AC_PUSH_MAX_ATTEMPTS is 3 here
    answers = (task_v10("T1", "input-required", text="Which day?"), task_v10("T1", "completed"))
    agent, config = await setup(push_client, fake_agent, receiver, *answers)
    await follow_up(push_client, agent)
    await follow_up(push_client, agent, "Monday")
    await eventually(lambda: len(receiver.ok()) == 2, "the later deliveries")

    async def settled() -> list[JSON] | None:
        rows = await deliveries(push_client, agent, "T1", config["id"])
        return rows if [r["state"] for r in rows] == ["dead", "delivered", "delivered"] else None

    rows = await eventually(settled, "one dead delivery and the later ones delivered")
    assert rows[0]["attempts"] == 3 and rows[0]["lastStatus"] == 500
    assert rows[0]["nextAttemptAt"] is None


async def test_a_delivery_that_cannot_be_sent_goes_dead_and_the_next_goes_on(
    settings: Settings,
    push_client: Client,
    fake_agent: StartFake,
    receiver: Receiver,
    db: asyncpg.Connection,
) -> None:
    # A config stored before the gateway checked its token: no header can carry it.
    answers = (task_v10("T1", "input-required", text="Which day?"), task_v10("T1", "completed"))
    agent, config = await setup(push_client, fake_agent, receiver, *answers, token="good")
    row_id = await db.fetchval("SELECT row_id FROM a2a_push_configs")
    sealer = Sealer(decode_key(settings.encryption_key))
    sealed = sealer.seal("bad\r\nX-Injected: 1", sealed_context(row_id))
    await db.execute("UPDATE a2a_push_configs SET token_sealed = $1", sealed)
    await follow_up(push_client, agent)

    async def dead() -> JSON | None:
        rows = await deliveries(push_client, agent, "T1", config["id"])
        return rows[0] if rows and rows[0]["state"] == "dead" else None

    row = await eventually(dead, "the unsendable delivery dead after its attempts")
    assert row["attempts"] == 3 and row["lastStatus"] is None
    assert row["lastError"] == "could not be sent: ValueError"
    assert receiver.got == []
    # The config's later deliveries are not held behind it (they fail the same way, each).
    await db.execute(
        "UPDATE a2a_push_configs SET token_sealed = $1",
        sealer.seal("good", sealed_context(row_id)),
    )
    await follow_up(push_client, agent, "Monday")
    # The answer is two deliveries, its status then its artifact, the second sent once the
    # first is settled: how many have arrived at a given look depends on the machine's load.
    await eventually(lambda: len(receiver.ok()) >= 2, "the next deliveries")
    status, artifact = receiver.ok()
    assert "statusUpdate" in status.body and "artifactUpdate" in artifact.body
    assert status.headers["X-A2A-Notification-Token"] == "good"
    assert artifact.headers["X-A2A-Notification-Token"] == "good"


async def test_redeliver_sends_a_dead_delivery_again_under_its_id(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    receiver.answers = [500, 500, 500]
    agent, config = await setup(push_client, fake_agent, receiver, task_v10("T1", "completed"))
    await follow_up(push_client, agent)
    base = f"/v1/a2a/{agent}/tasks/T1/push-configs/{config['id']}/deliveries"

    async def dead() -> JSON | None:
        rows = await deliveries(push_client, agent, "T1", config["id"])
        return rows[0] if rows and rows[0]["state"] == "dead" else None

    row = await eventually(dead, "a dead delivery")
    r = await push_client.call("POST", f"{base}/{row['id']}/redeliver")
    assert r.status == 202, r.raw
    assert r.json()["state"] == "pending"
    (got,) = await eventually(lambda: receiver.ok() or None, "the redelivery")
    assert got.delivery_id == row["id"]


async def test_a_410_disables_the_config(
    push_client: Client, fake_agent: StartFake, receiver: Receiver, db: asyncpg.Connection
) -> None:
    receiver.answers = [410]
    answers = (task_v10("T1", "input-required", text="Which day?"), task_v10("T1", "completed"))
    agent, config = await setup(push_client, fake_agent, receiver, *answers)
    await follow_up(push_client, agent)
    await eventually(lambda: receiver.got or None, "the 410")
    await eventually(
        lambda: db.fetchval("SELECT NOT enabled FROM a2a_push_configs"), "the config disabled"
    )
    await follow_up(push_client, agent, "Monday")
    rows = await deliveries(push_client, agent, "T1", config["id"])
    assert [(r["state"], r["lastStatus"]) for r in rows] == [("dead", 410)]
    assert len(receiver.got) == 1


async def test_a_redirect_is_not_followed(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    receiver.answers = [302]
    agent, _ = await setup(push_client, fake_agent, receiver, task_v10("T1", "completed"))
    await follow_up(push_client, agent)
    await eventually(lambda: receiver.ok() or None, "the retry after the redirect")
    assert [d.status for d in receiver.got] == [302, 200]


async def test_the_address_guard_is_checked_again_at_delivery(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake, receiver: Receiver
) -> None:
    # "localhost" passes at creation (a name); at delivery it resolves outside the allow-list.
    app = create_app(fast_push(settings, push_networks=parse_networks("10.0.0.0/8")))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        url = receiver.url.replace("127.0.0.1", "localhost")
        fake = await fake_agent(turns(task_v10("T1", "completed")))
        agent = await register(client, fake.url)
        await start_task(client, agent)
        config = await add_config(client, agent, "T1", url=url)
        await follow_up(client, agent)

        async def refused() -> JSON | None:
            rows = await deliveries(client, agent, "T1", config["id"])
            return rows[0] if rows and rows[0]["lastError"] else None

        row = await eventually(refused, "a refused attempt")
    assert "refused address" in row["lastError"] and "A2AC_PUSH_NETWORKS" in row["lastError"]
    assert receiver.got == []


async def refused_attempt(client: Client, agent: str, config: JSON) -> JSON:
    """The config's first delivery once an attempt at it has failed."""

    async def failed() -> JSON | None:
        rows = await deliveries(client, agent, "T1", config["id"])
        return rows[0] if rows and rows[0]["lastError"] else None

    return await eventually(failed, "a failed attempt")


@pytest.mark.parametrize("host", [*STORED_SPELLINGS, "①⑥⑨.②⑤④.①⑥⑨.②⑤④", "[fd00:ec2::254]"])
async def test_a_stored_webhook_spelling_a_refused_address_is_refused_at_delivery(
    push_client: Client,
    db: asyncpg.Connection,
    fake_agent: StartFake,
    receiver: Receiver,
    sockets: Sockets,
    host: str,
) -> None:
    agent, config = await setup(push_client, fake_agent, receiver, task_v10("T1", "completed"))
    port = int(receiver.url.split("/")[2].rsplit(":", 1)[1])
    # A row written past the guard, at the receiver's own port: 0.0.0.0 would reach it.
    await db.execute("UPDATE a2a_push_configs SET url = $1", f"http://{host}:{port}/hook")
    await follow_up(push_client, agent)
    row = await refused_attempt(push_client, agent, config)
    assert row["lastError"].startswith("refused address: ")
    assert receiver.got == [] and sockets.to_port(port) == []


async def test_a_stored_fullwidth_loopback_webhook_outside_push_networks_is_refused_at_delivery(
    settings: Settings,
    db: asyncpg.Connection,
    fake_agent: StartFake,
    receiver: Receiver,
    sockets: Sockets,
) -> None:
    app = create_app(fast_push(settings, push_networks=parse_networks("10.0.0.0/8")))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        fake = await fake_agent(turns(task_v10("T1", "completed")))
        agent = await register(client, fake.url)
        await start_task(client, agent)
        config = await add_config(client, agent, "T1", url="http://10.1.2.3:9/hook")
        port = int(receiver.url.split("/")[2].rsplit(":", 1)[1])
        url = f"http://{FULLWIDTH_LOOPBACK}:{port}/hook"
        await db.execute("UPDATE a2a_push_configs SET url = $1", url)
        await follow_up(client, agent)
        row = await refused_attempt(client, agent, config)
    assert row["lastError"] == "refused address: 127.0.0.1 is outside A2AC_PUSH_NETWORKS"
    assert receiver.got == [] and sockets.to_port(port) == []


async def test_a_receiver_that_hangs_never_holds_up_the_request_that_recorded_the_event(
    push_client: Client, fake_agent: StartFake
) -> None:
    release = asyncio.Event()
    arrived = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        arrived.set()
        await release.wait()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    answers = (task_v10("T1", "input-required", text="Which day?"), task_v10("T1", "completed"))
    async with serve_aiohttp(app) as base:
        fake = await fake_agent(turns(*answers))
        agent = await register(push_client, fake.url)
        await start_task(push_client, agent)
        await add_config(push_client, agent, "T1", url=base + "/hook")
        await follow_up(push_client, agent)
        await asyncio.wait_for(arrived.wait(), 20)
        # The receiver holds the first delivery; the next follow-up is answered all the same.
        await follow_up(push_client, agent, "Monday")
        release.set()


async def test_deliveries_are_counted_by_outcome(
    push_client: Client, fake_agent: StartFake, receiver: Receiver
) -> None:
    before = await scrape(push_client)
    receiver.answers = [500]
    agent, _ = await setup(push_client, fake_agent, receiver, task_v10("T1", "completed"))
    await follow_up(push_client, agent)
    await eventually(lambda: receiver.ok() or None, "a delivery")

    async def counted() -> bool:
        after = await scrape(push_client)
        delivered = moved(before, after, "a2ac_push_deliveries_total", outcome="delivered")
        retried = moved(before, after, "a2ac_push_deliveries_total", outcome="retry")
        return delivered == 1 and retried == 1

    await eventually(counted, "the attempts counted")
    after = await scrape(push_client)
    assert ("a2ac_push_pending", frozenset()) in after
    assert moved(before, after, "a2ac_push_delivery_seconds_count") == 2


def test_the_back_off_doubles_from_one_second_up_to_five_minutes_with_jitter() -> None:
    settings = Settings()
    for attempts, full in ((1, 1.0), (2, 2.0), (4, 8.0), (9, 256.0), (10, 300.0), (30, 300.0)):
        waits = [retry_after_s(attempts, settings) for _ in range(200)]
        assert all(full * 0.5 <= w <= full for w in waits)
        assert max(waits) - min(waits) > 0  # jittered, not in step
