"""The REST routes of push configs and deliveries, and the JWKS (SPEC §12)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from a2a_continue.app import create_app
from a2a_continue.settings import Settings, parse_networks
from tests.support.client import Client, assert_problem, register, token
from tests.support.fakes import Scripted, StartFake, task_v10
from tests.support.push import add_config, fast_push, owed, start_task
from tests.support.servers import serve_asgi
from tests.support.spellings import FULLWIDTH_LOOPBACK, REFUSED_SPELLINGS
from tests.support.waiting import eventually

JSON = dict[str, Any]


@pytest.fixture
async def push_client(settings: Settings, db: asyncpg.Connection) -> AsyncIterator[Client]:
    """A client of a gateway whose dispatcher does not run (configs only)."""
    app = create_app(fast_push(settings, push_dispatch=False))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        yield Client(base, session)


async def published(client: Client) -> list[JSON]:
    """The JWKS's keys, once the gateway has loaded (or made) its signing key."""

    async def keys() -> list[JSON] | None:
        r = await client.call("GET", "/.well-known/jwks.json", bearer=None)
        assert r.status == 200, r.raw
        found: list[JSON] = r.json()["keys"]
        return found or None

    return await eventually(keys, "a published key")


async def task_of(client: Client, fake_agent: StartFake) -> tuple[str, str]:
    fake = await fake_agent(Scripted(start=lambda r: task_v10("T1", "input-required")))
    agent = await register(client, fake.url)
    return agent, await start_task(client, agent)


async def test_create_answers_201_with_the_config_and_never_its_secrets(
    push_client: Client, fake_agent: StartFake, db: asyncpg.Connection
) -> None:
    agent, task = await task_of(push_client, fake_agent)
    body = {
        "url": "http://127.0.0.1:9/hook",
        "token": "tok-secret",
        "authentication": {"scheme": "Basic", "credentials": "cred-secret"},
    }
    r = await push_client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/push-configs", body)
    assert r.status == 201, r.raw
    config = r.json()
    assert config["url"] == "http://127.0.0.1:9/hook"
    assert config["version"] == "1.0"
    assert config["authentication"] == {"scheme": "Basic"}
    assert config["hasToken"] is True
    assert r.headers["Location"].endswith(f"/push-configs/{config['id']}")
    assert b"secret" not in r.raw
    row = await db.fetchrow("SELECT * FROM a2a_push_configs")
    assert b"secret" not in row["token_sealed"] and b"secret" not in row["credentials_sealed"]
    for path in ("", f"/{config['id']}"):
        shown = await push_client.call("GET", f"/v1/a2a/{agent}/tasks/{task}/push-configs{path}")
        assert shown.status == 200 and b"secret" not in shown.raw


async def test_list_get_and_delete_a_config_delete_again_is_204(
    push_client: Client, fake_agent: StartFake
) -> None:
    agent, task = await task_of(push_client, fake_agent)
    config = await add_config(push_client, agent, task, url="http://127.0.0.1:9/a", version="0.3")
    base = f"/v1/a2a/{agent}/tasks/{task}/push-configs"
    listed = (await push_client.call("GET", base)).json()["configs"]
    assert [c["id"] for c in listed] == [config["id"]] and listed[0]["version"] == "0.3"
    assert (await push_client.call("GET", f"{base}/{config['id']}")).json() == config
    assert (await push_client.call("DELETE", f"{base}/{config['id']}")).status == 204
    assert (await push_client.call("DELETE", f"{base}/{config['id']}")).status == 204
    assert_problem(await push_client.call("GET", f"{base}/{config['id']}"), 404)
    assert (await push_client.call("GET", base)).json()["configs"] == []


async def test_a_config_of_an_invisible_task_is_404(
    push_client: Client, fake_agent: StartFake
) -> None:
    agent, task = await task_of(push_client, fake_agent)
    config = await add_config(push_client, agent, task, url="http://127.0.0.1:9/a")
    base = f"/v1/a2a/{agent}/tasks/{task}/push-configs"
    bob = push_client.as_(token("bob@example.com"))
    assert_problem(await bob.call("POST", base, {"url": "http://127.0.0.1:9/b"}), 404)
    assert_problem(await bob.call("GET", base), 404)
    assert_problem(await bob.call("GET", f"{base}/{config['id']}"), 404)
    assert_problem(await bob.call("DELETE", f"{base}/{config['id']}"), 404)
    assert_problem(await bob.call("GET", f"{base}/{config['id']}/deliveries"), 404)


async def test_a_link_local_webhook_is_refused_with_422(
    push_client: Client, fake_agent: StartFake
) -> None:
    agent, task = await task_of(push_client, fake_agent)
    base = f"/v1/a2a/{agent}/tasks/{task}/push-configs"
    for url in ("http://169.254.169.254/latest", "http://[fe80::1]/x", "http://0.0.0.0/x"):
        problem = assert_problem(await push_client.call("POST", base, {"url": url}), 422)
        assert problem["errors"][0]["loc"] == "$.url"


@pytest.mark.parametrize("host", sorted(REFUSED_SPELLINGS))
async def test_a_webhook_spelling_a_refused_address_is_refused_with_422(
    push_client: Client, fake_agent: StartFake, db: asyncpg.Connection, host: str
) -> None:
    agent, task = await task_of(push_client, fake_agent)
    base = f"/v1/a2a/{agent}/tasks/{task}/push-configs"
    r = await push_client.call("POST", base, {"url": f"http://{host}:8080/hook"})
    (error,) = assert_problem(r, 422)["errors"]
    assert error["loc"] == "$.url" and REFUSED_SPELLINGS[host] in error["msg"]
    assert await db.fetchval("SELECT count(*) FROM a2a_push_configs") == 0


@pytest.mark.parametrize(
    ("networks", "created"), [("10.0.0.0/8", False), ("127.0.0.0/8", True), ("", True)]
)
async def test_push_networks_judge_a_fullwidth_loopback_webhook_as_loopback(
    settings: Settings, db: asyncpg.Connection, fake_agent: StartFake, networks: str, created: bool
) -> None:
    only = fast_push(settings, push_dispatch=False, push_networks=parse_networks(networks))
    async with serve_asgi(create_app(only)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        agent, task = await task_of(client, fake_agent)
        url = f"http://{FULLWIDTH_LOOPBACK}:9/hook"
        r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/push-configs", {"url": url})
    if created:
        assert r.status == 201, r.raw
    else:
        (error,) = assert_problem(r, 422)["errors"]
        assert "127.0.0.1 is outside A2AC_PUSH_NETWORKS" in error["msg"]
    assert await db.fetchval("SELECT count(*) FROM a2a_push_configs") == int(created)


async def test_a_token_or_credentials_no_header_could_carry_are_refused_with_422(
    push_client: Client, fake_agent: StartFake, db: asyncpg.Connection
) -> None:
    agent, task = await task_of(push_client, fake_agent)
    base = f"/v1/a2a/{agent}/tasks/{task}/push-configs"
    url = "http://127.0.0.1:9/a"
    bad = {
        "$.token": {"url": url, "token": "abc\r\nX-Injected: 1"},
        "$.authentication.credentials": {
            "url": url,
            "authentication": {"scheme": "Basic", "credentials": "dXNlcg==\n"},
        },
    }
    for loc, body in bad.items():
        problem = assert_problem(await push_client.call("POST", base, body), 422)
        assert [e["loc"] for e in problem["errors"]] == [loc]
        assert "X-Injected" not in str(problem) and "dXNlcg" not in str(problem)
    assert await db.fetchval("SELECT count(*) FROM a2a_push_configs") == 0


async def test_a_task_holds_at_most_ten_configs(push_client: Client, fake_agent: StartFake) -> None:
    agent, task = await task_of(push_client, fake_agent)
    for i in range(10):
        await add_config(push_client, agent, task, url=f"http://127.0.0.1:9/{i}")
    base = f"/v1/a2a/{agent}/tasks/{task}/push-configs"
    assert_problem(await push_client.call("POST", base, {"url": "http://127.0.0.1:9/x"}), 422)


async def test_config_routes_need_their_permissions(
    push_client: Client, fake_agent: StartFake
) -> None:
    agent, task = await task_of(push_client, fake_agent)
    base = f"/v1/a2a/{agent}/tasks/{task}/push-configs"
    reader = push_client.as_(token(perms=["a2a.read"]))
    assert_problem(await reader.call("POST", base, {"url": "http://127.0.0.1:9/x"}), 403)
    assert (await reader.call("GET", base)).status == 200


async def test_jwks_is_public_and_lists_the_signing_key(push_client: Client) -> None:
    keys = await published(push_client)
    assert keys[0]["kty"] == "EC" and keys[0]["alg"] == "ES256" and keys[0]["kid"]
    assert all("d" not in key for key in keys)


async def test_a_supplied_signing_key_is_published_and_the_old_one_kept(
    push_client: Client, settings: Settings, db: asyncpg.Connection
) -> None:
    before = (await published(push_client))[0]
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    app = create_app(fast_push(settings, push_dispatch=False, push_signing_key=pem.decode()))
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)

        async def rotated() -> list[JSON] | None:
            keys = await published(client)
            return keys if keys[0]["kid"] != before["kid"] else None

        keys = await eventually(rotated, "the supplied key published")
    kids = [key["kid"] for key in keys]
    assert kids[0] != before["kid"] and before["kid"] in kids


async def test_configs_and_deliveries_go_with_their_task(
    push_client: Client, fake_agent: StartFake, db: asyncpg.Connection
) -> None:
    agent, task = await task_of(push_client, fake_agent)
    await add_config(push_client, agent, task, url="http://127.0.0.1:9/a")
    await push_client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/messages", {"text": "Paris"})
    await db.execute(
        "INSERT INTO a2a_push_deliveries (config, task, seq, kind, snapshot)"
        " SELECT row_id, task, 1, 'task', '{}' FROM a2a_push_configs"
    )  # a retry's row (the dispatcher is off)
    assert len(await owed(db)) == 1
    await db.execute("DELETE FROM a2a_tasks")
    assert await db.fetchval("SELECT count(*) FROM a2a_push_configs") == 0
    assert await db.fetchval("SELECT count(*) FROM a2a_push_deliveries") == 0


async def test_deliveries_page_by_cursor_and_a_cursor_not_issued_is_422(
    push_client: Client, fake_agent: StartFake
) -> None:
    fake = await fake_agent(
        Scripted(follow_up=lambda r: task_v10("T1", "input-required", text="Which day?"))
    )
    agent = await register(push_client, fake.url)
    task = await start_task(push_client, agent)
    config = await add_config(push_client, agent, task, url="http://127.0.0.1:9/hook")
    for text in ("Paris", "Monday"):
        r = await push_client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/messages", {"text": text})
        assert r.status == 200, r.raw
    path = f"/v1/a2a/{agent}/tasks/{task}/push-configs/{config['id']}/deliveries"
    seen: list[tuple[int, str]] = []
    query = "?limit=1"
    while True:
        page = (await push_client.call("GET", path + query)).json()
        seen += [(d["seq"], d["id"]) for d in page["deliveries"]]
        if page["nextCursor"] is None:
            break
        query = f"?limit=1&cursor={page['nextCursor']}"
    everything = (await push_client.call("GET", path)).json()["deliveries"]
    assert len(seen) >= 2
    assert seen == [(d["seq"], d["id"]) for d in everything]

    def encoded(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    for bad in ("99999999999.0", "1.-1", " 1.0", "1.0.0", "\u0661.0", "1.0\x00"):
        r = await push_client.call("GET", f"{path}?cursor={encoded(bad)}")
        problem = assert_problem(r, 422)
        assert problem["errors"][0]["loc"] == "$.query.cursor", bad
