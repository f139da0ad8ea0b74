"""The agent registry: create, list, read, update, delete; visibility; sealed credentials."""

from __future__ import annotations

import base64
import datetime as dt
import logging
import uuid
from typing import Any

import asyncpg
import pytest

from a2a_continue.runtime.secrets import Sealer, decode_key
from a2a_continue.settings import Settings
from tests.support.client import Client, Response, token

AGENTS = "/v1/a2a/agents"
ALICE = "alice@example.com"

alice = token(ALICE, teams=["red"])
bob = token("bob@example.com")  # no team
carol = token("carol@example.com", teams=["red"])  # alice's teammate
admin = token("root@example.com", admin=True)

AGENT_KEYS = {
    "id",
    "name",
    "endpointUrl",
    "protocolVersion",
    "visibility",
    "teamId",
    "owner",
    "authType",
    "capabilities",
    "timeoutSeconds",
    "createdAt",
    "updatedAt",
    "card",
    "cardUrl",
    "cardKeys",
    "requireSignedCard",
    "cardSignature",
}


def body(**changes: Any) -> dict[str, Any]:
    """A valid registration body with ``changes`` applied."""
    return {
        "name": "weather",
        "endpointUrl": "http://127.0.0.1:9/a2a",
        "protocolVersion": "1.0",
        **changes,
    }


async def create(client: Client, bearer: str = alice, **changes: Any) -> dict[str, Any]:
    r = await client.call("POST", AGENTS, body(**changes), bearer=bearer)
    assert r.status == 201, r.raw
    agent: dict[str, Any] = r.json()
    return agent


def stamp(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value)


def assert_422(r: Response, loc: str) -> None:
    assert r.status == 422, r.raw
    assert r.headers["Content-Type"] == "application/problem+json"
    errors = r.json()["errors"]
    assert errors and all({"loc", "msg"} <= set(e) for e in errors)
    assert any(e["loc"].startswith(loc) for e in errors), errors


# ---- create -------------------------------------------------------------------------------


async def test_create_returns_201_with_the_agent(client: Client) -> None:
    r = await client.call("POST", AGENTS, body(timeoutSeconds=12.5), bearer=alice)
    assert r.status == 201, r.raw
    agent = r.json()
    assert set(agent) == AGENT_KEYS
    uuid.UUID(agent["id"])
    assert agent["name"] == "weather"
    assert agent["endpointUrl"] == "http://127.0.0.1:9/a2a"
    assert agent["protocolVersion"] == "1.0"
    assert agent["visibility"] == "private"
    assert agent["teamId"] is None
    assert agent["owner"] == ALICE
    assert agent["authType"] == "none"
    assert agent["timeoutSeconds"] == 12.5
    assert stamp(agent["createdAt"]) == stamp(agent["updatedAt"])


async def test_create_answers_with_the_location_of_the_new_agent(client: Client) -> None:
    r = await client.call("POST", AGENTS, body(), bearer=alice)
    assert r.status == 201, r.raw
    assert r.headers["Location"] == f"{AGENTS}/{r.json()['id']}"
    again = await client.call("GET", r.headers["Location"], bearer=alice)
    assert again.status == 200, again.raw
    assert again.json() == r.json()


async def test_create_stores_the_agent(client: Client, db: asyncpg.Connection) -> None:
    agent = await create(client, visibility="team", teamId="red", protocolVersion="0.3")
    row = await db.fetchrow("SELECT * FROM a2a_agents WHERE id = $1", uuid.UUID(agent["id"]))
    assert row is not None
    assert (row["owner"], row["visibility"], row["team_id"], row["protocol_version"]) == (
        ALICE,
        "team",
        "red",
        "0.3",
    )
    assert row["auth_type"] == "none" and row["auth_sealed"] is None


@pytest.mark.parametrize(
    "url",
    [
        "/relative/path",
        "example.com/a2a",
        "ftp://example.com/a2a",
        "http://",
        "http://user:secret@example.com/a2a",
        "https://token@example.com/a2a",
    ],
)
async def test_create_rejects_endpoint_url_that_is_not_absolute_http_without_credentials(
    client: Client, db: asyncpg.Connection, url: str
) -> None:
    r = await client.call("POST", AGENTS, body(endpointUrl=url), bearer=alice)
    assert_422(r, "$.endpointUrl")
    assert b"secret" not in r.raw
    assert await db.fetchval("SELECT count(*) FROM a2a_agents") == 0


@pytest.mark.parametrize(
    ("changes", "loc"),
    [
        ({"protocolVersion": "2.0"}, "$.protocolVersion"),
        ({"protocolVersion": 1.0}, "$.protocolVersion"),
        ({"visibility": "secret"}, "$.visibility"),
        ({"visibility": "team"}, "$.teamId"),
        ({"colour": "blue"}, "$"),
        ({"auth": {"type": "oauth", "token": "x"}}, "$.auth"),
        ({"auth": {"type": "bearer"}}, "$.auth"),
        ({"auth": {"type": "basic", "username": "u"}}, "$.auth"),
        ({"auth": {"type": "headers", "headers": {}}}, "$.auth"),
        ({"name": ""}, "$.name"),
        ({"timeoutSeconds": 0}, "$.timeoutSeconds"),
        ({"timeoutSeconds": 100000}, "$.timeoutSeconds"),
    ],
    ids=lambda v: str(v),
)
async def test_create_rejects_invalid_body_with_422(
    client: Client, db: asyncpg.Connection, changes: dict[str, Any], loc: str
) -> None:
    r = await client.call("POST", AGENTS, body(**changes), bearer=alice)
    assert_422(r, loc)
    assert await db.fetchval("SELECT count(*) FROM a2a_agents") == 0


@pytest.mark.parametrize("raw", [b"", b"  \n"], ids=["empty", "blank"])
async def test_an_empty_body_is_422_saying_it_is_empty(client: Client, raw: bytes) -> None:
    r = await client.call(
        "POST", AGENTS, data=raw, bearer=alice, headers={"Content-Type": "application/json"}
    )
    assert_422(r, "$")
    assert r.json()["errors"][0]["msg"] == "the request body is empty; expected a JSON object"


async def test_create_rejects_missing_required_field_with_422(client: Client) -> None:
    incomplete = body()
    del incomplete["endpointUrl"]
    assert_422(await client.call("POST", AGENTS, incomplete, bearer=alice), "$")


@pytest.mark.parametrize("raw", [b"", b"not json", b"{", b"[]", b'"agent"'])
async def test_create_rejects_non_json_or_non_object_body_with_422(
    client: Client, raw: bytes
) -> None:
    r = await client.call(
        "POST", AGENTS, data=raw, bearer=alice, headers={"Content-Type": "application/json"}
    )
    assert_422(r, "$")


async def test_create_refuses_a_team_the_caller_is_not_in(client: Client) -> None:
    r = await client.call("POST", AGENTS, body(visibility="team", teamId="blue"), bearer=alice)
    assert r.status == 403, r.raw


async def test_admin_may_create_an_agent_for_any_team(client: Client) -> None:
    agent = await create(client, bearer=admin, visibility="team", teamId="blue")
    assert agent["teamId"] == "blue"


# ---- list ---------------------------------------------------------------------------------


async def test_list_pages_newest_first_without_duplicates(client: Client) -> None:
    created = [(await create(client, name=f"agent-{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    pages: list[int] = []
    path = f"{AGENTS}?limit=2"
    while True:
        r = await client.call("GET", path, bearer=alice)
        assert r.status == 200, r.raw
        page = r.json()
        assert set(page) == {"agents", "nextCursor"}
        pages.append(len(page["agents"]))
        seen += [a["id"] for a in page["agents"]]
        if page["nextCursor"] is None:
            break
        path = f"{AGENTS}?limit=2&cursor={page['nextCursor']}"
    assert pages == [2, 2, 1]
    assert seen == created[::-1]


async def test_list_without_limit_returns_all_with_null_cursor(client: Client) -> None:
    for i in range(3):
        await create(client, name=f"agent-{i}")
    page = (await client.call("GET", AGENTS, bearer=alice)).json()
    assert len(page["agents"]) == 3
    assert page["nextCursor"] is None


@pytest.mark.parametrize(
    "query",
    ["cursor=garbage", "cursor=W10", "cursor=%5B%5D", "limit=0", "limit=201", "limit=two"],
)
async def test_list_rejects_bad_cursor_or_limit_with_422(client: Client, query: str) -> None:
    r = await client.call("GET", f"{AGENTS}?{query}", bearer=alice)
    assert r.status == 422, r.raw
    assert r.json()["errors"][0]["loc"].startswith("$.query.")


# ---- visibility ---------------------------------------------------------------------------


async def three_agents(client: Client) -> dict[str, str]:
    """Alice's private, team (red) and public agents: visibility → id."""
    return {
        v: (
            await create(client, name=v, visibility=v, **({"teamId": "red"} if v == "team" else {}))
        )["id"]
        for v in ("private", "team", "public")
    }


async def visible_ids(client: Client, bearer: str) -> set[str]:
    r = await client.call("GET", AGENTS, bearer=bearer)
    assert r.status == 200, r.raw
    return {a["id"] for a in r.json()["agents"]}


@pytest.mark.parametrize(
    ("who", "sees"),
    [
        (alice, {"private", "team", "public"}),
        (carol, {"team", "public"}),
        (bob, {"public"}),
        (admin, {"private", "team", "public"}),
    ],
    ids=["owner", "team-member", "stranger", "admin"],
)
async def test_list_and_get_show_only_visible_agents(
    client: Client, who: str, sees: set[str]
) -> None:
    ids = await three_agents(client)
    assert await visible_ids(client, who) == {ids[v] for v in sees}
    for visibility, agent_id in ids.items():
        r = await client.call("GET", f"{AGENTS}/{agent_id}", bearer=who)
        assert r.status == (200 if visibility in sees else 404), (visibility, r.raw)


async def test_team_agent_is_invisible_to_a_member_of_another_team(client: Client) -> None:
    ids = await three_agents(client)
    blue = token("dan@example.com", teams=["blue"])
    assert await visible_ids(client, blue) == {ids["public"]}


@pytest.mark.parametrize(
    ("method", "payload"), [("GET", None), ("PATCH", {"name": "x"}), ("DELETE", None)]
)
async def test_invisible_agent_answers_404_never_403(
    client: Client, db: asyncpg.Connection, method: str, payload: Any
) -> None:
    ids = await three_agents(client)
    for who, hidden in ((bob, ("private", "team")), (carol, ("private",))):
        for visibility in hidden:
            r = await client.call(method, f"{AGENTS}/{ids[visibility]}", payload, bearer=who)
            assert r.status == 404, (visibility, r.raw)
    assert await db.fetchval("SELECT count(*) FROM a2a_agents WHERE name = 'x'") == 0
    assert await db.fetchval("SELECT count(*) FROM a2a_agents") == 3


async def test_unknown_agent_answers_404(client: Client) -> None:
    r = await client.call("GET", f"{AGENTS}/{uuid.uuid4()}", bearer=admin)
    assert r.status == 404, r.raw


# ---- update and delete: owner or admin only -----------------------------------------------


@pytest.mark.parametrize(
    ("who", "visibility"), [(carol, "team"), (bob, "public"), (carol, "public")]
)
@pytest.mark.parametrize(("method", "payload"), [("PATCH", {"name": "x"}), ("DELETE", None)])
async def test_non_owner_who_can_see_the_agent_cannot_change_it(
    client: Client,
    db: asyncpg.Connection,
    who: str,
    visibility: str,
    method: str,
    payload: Any,
) -> None:
    ids = await three_agents(client)
    r = await client.call(method, f"{AGENTS}/{ids[visibility]}", payload, bearer=who)
    assert r.status == 403, r.raw
    row = await db.fetchrow("SELECT name FROM a2a_agents WHERE id = $1", uuid.UUID(ids[visibility]))
    assert row is not None and row["name"] == visibility


@pytest.mark.parametrize("who", [alice, admin], ids=["owner", "admin"])
async def test_owner_or_admin_may_update_an_agent(client: Client, who: str) -> None:
    agent = await create(client)
    patch = {
        "name": "renamed",
        "endpointUrl": "https://agents.example.com/rpc",
        "protocolVersion": "0.3",
        "visibility": "public",
        "timeoutSeconds": 7,
    }
    r = await client.call("PATCH", f"{AGENTS}/{agent['id']}", patch, bearer=who)
    assert r.status == 200, r.raw
    updated = r.json()
    assert {k: updated[k] for k in patch} == patch
    assert updated["owner"] == ALICE
    assert updated["createdAt"] == agent["createdAt"]
    assert stamp(updated["updatedAt"]) > stamp(agent["updatedAt"])
    again = (await client.call("GET", f"{AGENTS}/{agent['id']}", bearer=alice)).json()
    assert again == updated


async def test_update_leaves_unnamed_fields_alone(client: Client) -> None:
    agent = await create(client, visibility="team", teamId="red", timeoutSeconds=3)
    r = await client.call("PATCH", f"{AGENTS}/{agent['id']}", {"name": "n2"}, bearer=alice)
    assert r.status == 200, r.raw
    updated = r.json()
    assert {k: v for k, v in updated.items() if k not in ("name", "updatedAt")} == {
        k: v for k, v in agent.items() if k not in ("name", "updatedAt")
    }


@pytest.mark.parametrize(
    ("patch", "loc"),
    [
        ({"endpointUrl": "ftp://example.com"}, "$.endpointUrl"),
        ({"visibility": "team"}, "$.teamId"),
        ({"protocolVersion": "0.2"}, "$.protocolVersion"),
        ({"owner": "bob@example.com"}, "$"),
        ({"name": None}, "$.name"),
    ],
    ids=lambda v: str(v),
)
async def test_update_rejects_invalid_patch_with_422(
    client: Client, patch: dict[str, Any], loc: str
) -> None:
    agent = await create(client)
    assert_422(await client.call("PATCH", f"{AGENTS}/{agent['id']}", patch, bearer=alice), loc)
    again = (await client.call("GET", f"{AGENTS}/{agent['id']}", bearer=alice)).json()
    assert again == agent


async def test_update_to_private_removes_the_team_when_asked(client: Client) -> None:
    agent = await create(client, visibility="team", teamId="red")
    patch = {"visibility": "private", "teamId": None}
    r = await client.call("PATCH", f"{AGENTS}/{agent['id']}", patch, bearer=alice)
    assert r.status == 200, r.raw
    assert (r.json()["visibility"], r.json()["teamId"]) == ("private", None)
    assert await visible_ids(client, carol) == set()


@pytest.mark.parametrize("who", [alice, admin], ids=["owner", "admin"])
async def test_owner_or_admin_may_delete_an_agent(client: Client, who: str) -> None:
    agent = await create(client)
    r = await client.call("DELETE", f"{AGENTS}/{agent['id']}", bearer=who)
    assert r.status == 204, r.raw
    assert r.raw == b""
    r = await client.call("GET", f"{AGENTS}/{agent['id']}", bearer=alice)
    assert r.status == 404, r.raw
    r = await client.call("DELETE", f"{AGENTS}/{agent['id']}", bearer=alice)
    assert r.status == 404, r.raw


async def test_delete_removes_the_agents_tasks_and_events(
    client: Client, db: asyncpg.Connection
) -> None:
    agent = await create(client)
    kept = await create(client, name="kept")
    for agent_id in (agent["id"], kept["id"]):
        task = await db.fetchval(
            """INSERT INTO a2a_tasks (agent_id, task_id, state, owner)
               VALUES ($1, 't1', 'working', $2) RETURNING id""",
            uuid.UUID(agent_id),
            ALICE,
        )
        await db.execute(
            """INSERT INTO a2a_task_events (task, seq, type, new_state, actor)
               VALUES ($1, 1, 'task_created', 'working', $2)""",
            task,
            ALICE,
        )
    r = await client.call("DELETE", f"{AGENTS}/{agent['id']}", bearer=alice)
    assert r.status == 204, r.raw
    r = await client.call("GET", f"/v1/a2a/{agent['id']}/tasks/t1", bearer=alice)
    assert r.status == 404, r.raw
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 1
    assert await db.fetchval("SELECT count(*) FROM a2a_task_events") == 1
    remaining = await db.fetchval("SELECT agent_id FROM a2a_tasks")
    assert str(remaining) == kept["id"]


# ---- credentials --------------------------------------------------------------------------

TOKEN_SECRET = "tok-5ecret-Zq81"
PASSWORD_SECRET = "pw-5ecret-Kx27"
HEADER_SECRET = "hdr-5ecret-Lm93"

CREDENTIALS: dict[str, tuple[dict[str, Any], str]] = {
    "bearer": ({"type": "bearer", "token": TOKEN_SECRET}, TOKEN_SECRET),
    "basic": ({"type": "basic", "username": "svc", "password": PASSWORD_SECRET}, PASSWORD_SECRET),
    "headers": (
        {"type": "headers", "headers": {"X-Api-Key": HEADER_SECRET, "X-Tenant": "acme"}},
        HEADER_SECRET,
    ),
}


def message_reply(request: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 agent answering with a plain message (no task)."""
    return {
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": {"message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "ok"}]}},
    }


@pytest.mark.parametrize("kind", list(CREDENTIALS))
async def test_stored_credentials_are_ciphertext(
    client: Client, db: asyncpg.Connection, settings: Settings, kind: str
) -> None:
    auth, secret = CREDENTIALS[kind]
    agent = await create(client, auth=auth)
    assert agent["authType"] == kind
    row = await db.fetchrow(
        "SELECT auth_type, auth_sealed FROM a2a_agents WHERE id = $1", uuid.UUID(agent["id"])
    )
    assert row is not None and row["auth_type"] == kind
    sealed = bytes(row["auth_sealed"])
    assert secret.encode() not in sealed
    assert base64.b64encode(secret.encode()) not in sealed
    assert b"svc" not in sealed and b"acme" not in sealed
    opened = Sealer(decode_key(settings.encryption_key)).open(sealed, uuid.UUID(agent["id"]).bytes)
    assert opened == auth


@pytest.mark.parametrize("kind", list(CREDENTIALS))
async def test_credentials_appear_in_no_response(client: Client, kind: str) -> None:
    auth, secret = CREDENTIALS[kind]
    url = f"{AGENTS}/{(await create(client, auth=auth))['id']}"
    responses = [
        await client.call("POST", AGENTS, body(auth=auth), bearer=alice),
        await client.call("GET", url, bearer=alice),
        await client.call("GET", AGENTS, bearer=alice),
        await client.call("PATCH", url, {"name": "renamed"}, bearer=alice),
        await client.call("PATCH", url, {"auth": auth}, bearer=alice),
    ]
    for r in responses:
        assert r.status in (200, 201), r.raw
        assert secret.encode() not in r.raw
        assert b"auth_sealed" not in r.raw and b"authSealed" not in r.raw
        assert not ({"auth", "token", "password", "headers"} & set(r.json()))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("bearer", {"authorization": f"Bearer {TOKEN_SECRET}"}),
        (
            "basic",
            {
                "authorization": "Basic "
                + base64.b64encode(f"svc:{PASSWORD_SECRET}".encode()).decode()
            },
        ),
        ("headers", {"x-api-key": HEADER_SECRET, "x-tenant": "acme"}),
    ],
)
async def test_agent_receives_its_credentials(
    client: Client, fake_agent: Any, kind: str, expected: dict[str, str]
) -> None:
    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        return message_reply(request)

    agent = await fake_agent(answer)
    registered = await create(client, endpointUrl=agent.url, auth=CREDENTIALS[kind][0])
    r = await client.call("POST", f"/v1/a2a/{registered['id']}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    received = {k.lower(): v for k, v in agent.headers[0].items()}
    assert {k: received.get(k) for k in expected} == expected
    assert CREDENTIALS[kind][1].encode() not in r.raw


async def test_update_with_null_auth_removes_the_credentials(
    client: Client, db: asyncpg.Connection, fake_agent: Any
) -> None:
    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        return message_reply(request)

    agent = await fake_agent(answer)
    registered = await create(client, endpointUrl=agent.url, auth=CREDENTIALS["bearer"][0])
    url = f"{AGENTS}/{registered['id']}"
    r = await client.call("PATCH", url, {"auth": None}, bearer=alice)
    assert r.status == 200, r.raw
    assert r.json()["authType"] == "none"
    row = await db.fetchrow(
        "SELECT auth_type, auth_sealed FROM a2a_agents WHERE id = $1", uuid.UUID(registered["id"])
    )
    assert row is not None and (row["auth_type"], row["auth_sealed"]) == ("none", None)
    r = await client.call("POST", f"/v1/a2a/{registered['id']}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    assert "authorization" not in {k.lower() for k in agent.headers[0]}


async def test_update_with_new_auth_replaces_the_credentials(
    client: Client, fake_agent: Any
) -> None:
    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        return message_reply(request)

    agent = await fake_agent(answer)
    registered = await create(client, endpointUrl=agent.url, auth=CREDENTIALS["bearer"][0])
    r = await client.call(
        "PATCH", f"{AGENTS}/{registered['id']}", {"auth": CREDENTIALS["headers"][0]}, bearer=alice
    )
    assert r.status == 200, r.raw
    assert r.json()["authType"] == "headers"
    r = await client.call("POST", f"/v1/a2a/{registered['id']}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    received = {k.lower(): v for k, v in agent.headers[0].items()}
    assert received["x-api-key"] == HEADER_SECRET
    assert "authorization" not in received


@pytest.mark.parametrize("kind", list(CREDENTIALS))
async def test_credentials_are_not_logged_when_the_agent_is_unreachable(
    client: Client, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    caplog.set_level(logging.DEBUG)
    auth, secret = CREDENTIALS[kind]
    registered = await create(client, endpointUrl="http://127.0.0.1:1/a2a", auth=auth)
    r = await client.call("POST", f"/v1/a2a/{registered['id']}/messages", {"text": "hi"})
    assert r.status == 502, r.raw
    assert secret.encode() not in r.raw
    assert secret not in caplog.text
    assert all(secret not in str(rec.args) for rec in caplog.records)
