"""Reading tasks: one task in the gateway's shape, listings, filters, pages, and who sees what."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import asyncpg
import pytest

from tests.support.client import TASK_FIELDS, Client, register, token
from tests.support.fakes import StartFake
from tests.support.sdk_agent import SdkAgent

JSON = dict[str, Any]

ALICE = "alice@example.com"
BOB = token("bob@example.com")
BOB_IN_BLUE = token("bob@example.com", teams=["blue"])
ALICE_IN_BLUE = token(ALICE, teams=["blue"])
ADMIN = token("carol@example.com", admin=True)


async def state_from_text(request: JSON) -> JSON:
    """A 1.0 agent starting a new task whose state is the text it was sent."""
    message = request["params"]["message"]
    task = {
        "id": str(uuid.uuid4()),
        "contextId": message.get("contextId") or str(uuid.uuid4()),
        "status": {"state": message["parts"][0]["text"]},
    }
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"task": task}}


@pytest.fixture
async def agent_url(fake_agent: StartFake) -> str:
    return (await fake_agent(state_from_text)).url


async def start(
    client: Client, agent: str, text: str = "TASK_STATE_INPUT_REQUIRED", **extra: Any
) -> str:
    """Start a task through the gateway; return the agent's task id."""
    body = {"text": text, **extra} if "message" not in extra else extra
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", body)
    assert r.status == 200, r.raw
    return str(r.json()["result"]["task"]["id"])


async def listed(client: Client, agent: str, query: str = "") -> list[str]:
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks{query}")
    assert r.status == 200, r.raw
    return [t["id"] for t in r.json()["tasks"]]


# ---- one task ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_get_task_returns_the_gateway_shape(
    client: Client, db: asyncpg.Connection, sdk: SdkAgent, version: str
) -> None:
    agent = await register(client, sdk.url, version)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "weather?"})
    result = r.json()["result"]
    answered = result["task"] if version == "1.0" else result

    r = await client.call("GET", f"/v1/a2a/{agent}/tasks/{answered['id']}")
    assert r.status == 200, r.raw
    task = r.json()
    assert set(task) == TASK_FIELDS
    assert task["agentId"] == agent
    assert (task["id"], task["contextId"]) == (answered["id"], answered["contextId"])
    assert task["state"] == "input-required"
    assert task["statusMessage"] == answered["status"]["message"]
    assert (task["artifacts"], task["owner"], task["teamId"]) == ([], ALICE, None)
    assert (task["completedAt"], task["lastSeq"]) == (None, 1)
    row = await db.fetchrow("SELECT created_at, updated_at FROM a2a_tasks")
    assert row is not None
    assert dt.datetime.fromisoformat(task["createdAt"]) == row["created_at"]
    assert dt.datetime.fromisoformat(task["updatedAt"]) == row["updated_at"]


async def test_get_task_of_an_unknown_task_id_is_not_found(client: Client, agent_url: str) -> None:
    agent = await register(client, agent_url)
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks/no-such-task")
    assert r.status == 404, r.raw
    assert r.headers["Content-Type"] == "application/problem+json"


# ---- listings ----------------------------------------------------------------------------------


async def test_list_tasks_is_newest_first(client: Client, agent_url: str) -> None:
    agent = await register(client, agent_url)
    started = [await start(client, agent) for _ in range(3)]
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks")
    assert r.status == 200, r.raw
    body = r.json()
    assert [t["id"] for t in body["tasks"]] == started[::-1]
    assert body["nextCursor"] is None
    assert all(set(t) == TASK_FIELDS for t in body["tasks"])


@pytest.mark.parametrize(
    "spelling", ["input-required", "TASK_STATE_INPUT_REQUIRED", "input_required", "Input-Required"]
)
async def test_list_tasks_filters_by_state_in_any_spelling(
    client: Client, agent_url: str, spelling: str
) -> None:
    agent = await register(client, agent_url)
    waiting = await start(client, agent, "TASK_STATE_INPUT_REQUIRED")
    await start(client, agent, "TASK_STATE_WORKING")
    await start(client, agent, "TASK_STATE_COMPLETED")
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks?state={spelling}")
    assert r.status == 200, r.raw
    assert [(t["id"], t["state"]) for t in r.json()["tasks"]] == [(waiting, "input-required")]


async def test_list_tasks_filters_by_context_id(client: Client, agent_url: str) -> None:
    agent = await register(client, agent_url)
    in_a = [
        await start(client, agent, message={"contextId": "ctx-a", "parts": [{"text": "working"}]})
        for _ in range(2)
    ]
    await start(client, agent, message={"contextId": "ctx-b", "parts": [{"text": "working"}]})
    assert await listed(client, agent, "?contextId=ctx-a") == in_a[::-1]


async def test_list_tasks_rejects_an_unknown_state(client: Client, agent_url: str) -> None:
    agent = await register(client, agent_url)
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks?state=sleeping")
    assert r.status == 422, r.raw
    assert r.json()["errors"][0]["loc"] == "$.query.state"


async def insert_task(
    db: asyncpg.Connection, agent: str, task_id: str, created_at: dt.datetime
) -> asyncpg.Record:
    row = await db.fetchrow(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, created_at)"
        " VALUES ($1, $2, 'working', $3, $4) RETURNING id, task_id, created_at",
        uuid.UUID(agent),
        task_id,
        ALICE,
        created_at,
    )
    assert row is not None
    return row


async def test_list_tasks_pages_by_cursor_without_duplicates(
    client: Client, db: asyncpg.Connection, agent_url: str
) -> None:
    agent = await register(client, agent_url)
    # Four tasks share one creation time: the cursor must break the tie by row id.
    base = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    stamps = [base] * 4 + [base + dt.timedelta(seconds=s) for s in (1, 2, 3)]
    rows = [await insert_task(db, agent, f"task-{i}", at) for i, at in enumerate(stamps)]
    expected = [r["task_id"] for r in sorted(rows, key=lambda r: (r["created_at"], r["id"]))][::-1]

    seen: list[str] = []
    cursor: str | None = None
    for size in (3, 3, 1):
        query = "?limit=3" + (f"&cursor={cursor}" if cursor else "")
        r = await client.call("GET", f"/v1/a2a/{agent}/tasks{query}")
        assert r.status == 200, r.raw
        page = r.json()
        assert len(page["tasks"]) == size
        seen += [t["id"] for t in page["tasks"]]
        cursor = page["nextCursor"]
    assert cursor is None
    assert seen == expected


async def test_list_tasks_rejects_a_cursor_it_did_not_issue(client: Client, agent_url: str) -> None:
    agent = await register(client, agent_url)
    r = await client.call("GET", f"/v1/a2a/{agent}/tasks?cursor=not-a-cursor")
    assert r.status == 422, r.raw
    assert r.json()["errors"][0]["loc"] == "$.query.cursor"


# ---- visibility ----------------------------------------------------------------------------------


async def reads(client: Client, agent: str, task: str) -> tuple[int, int, list[str]]:
    """Status of GET task and GET events, and the task ids the listing shows."""
    one = await client.call("GET", f"/v1/a2a/{agent}/tasks/{task}")
    events = await client.call("GET", f"/v1/a2a/{agent}/tasks/{task}/events")
    return one.status, events.status, await listed(client, agent)


async def test_the_owner_sees_their_task(client: Client, agent_url: str) -> None:
    agent = await register(client, agent_url)
    task = await start(client, agent)
    assert await reads(client, agent, task) == (200, 200, [task])


async def test_a_member_of_the_tasks_team_sees_it(client: Client, agent_url: str) -> None:
    alice = client.as_(ALICE_IN_BLUE)
    agent = await register(alice, agent_url, visibility="team", teamId="blue")
    task = await start(alice, agent, teamId="blue")
    assert await reads(client.as_(BOB_IN_BLUE), agent, task) == (200, 200, [task])


async def test_a_member_of_the_agents_team_does_not_see_a_task_started_without_team(
    client: Client, agent_url: str
) -> None:
    alice = client.as_(ALICE_IN_BLUE)
    agent = await register(alice, agent_url, visibility="team", teamId="blue")
    task = await start(alice, agent)
    assert await reads(client.as_(BOB_IN_BLUE), agent, task) == (404, 404, [])


async def test_another_user_does_not_see_the_task(
    client: Client, fake_agent: StartFake, db: asyncpg.Connection
) -> None:
    fake = await fake_agent(state_from_text)
    agent = await register(client, fake.url, visibility="public")
    task = await start(client, agent)
    before = await db.fetchrow("SELECT * FROM a2a_tasks")
    bob = client.as_(BOB)
    assert await reads(bob, agent, task) == (404, 404, [])
    r = await bob.call("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel")
    assert r.status == 404, r.raw
    assert len(fake.received) == 1  # only the start reached the agent
    assert await db.fetchrow("SELECT * FROM a2a_tasks") == before


async def test_an_admin_sees_any_task(client: Client, agent_url: str) -> None:
    agent = await register(client, agent_url)  # private to alice
    task = await start(client, agent)
    assert await reads(client.as_(ADMIN), agent, task) == (200, 200, [task])


async def test_a_task_of_an_agent_the_caller_cannot_see_is_not_found(
    client: Client, fake_agent: StartFake
) -> None:
    fake = await fake_agent(state_from_text)
    agent = await register(client, fake.url, visibility="public")
    bob = client.as_(BOB)
    task = await start(bob, agent)
    r = await client.call("PATCH", f"/v1/a2a/agents/{agent}", {"visibility": "private"})
    assert r.status == 200, r.raw

    for method, path in [
        ("GET", f"/v1/a2a/{agent}/tasks/{task}"),
        ("GET", f"/v1/a2a/{agent}/tasks/{task}/events"),
        ("GET", f"/v1/a2a/{agent}/tasks"),
        ("POST", f"/v1/a2a/{agent}/tasks/{task}/cancel"),
    ]:
        r = await bob.call(method, path)
        assert r.status == 404, (method, path, r.raw)
    assert len(fake.received) == 1


async def test_list_tasks_pages_through_state_and_context_filters_together(
    client: Client, agent_url: str
) -> None:
    agent = await register(client, agent_url)

    async def begin(context: str, state: str) -> str:
        message = {"contextId": context, "parts": [{"text": state}]}
        return await start(client, agent, message=message)

    wanted = [await begin("ctx-a", "working") for _ in range(3)]
    await begin("ctx-a", "TASK_STATE_COMPLETED")
    await begin("ctx-b", "working")
    pages: list[str] = []
    query = "?state=working&contextId=ctx-a&limit=2"
    while True:
        r = await client.call("GET", f"/v1/a2a/{agent}/tasks{query}")
        assert r.status == 200, r.raw
        pages += [t["id"] for t in r.json()["tasks"]]
        cursor = r.json()["nextCursor"]
        if cursor is None:
            break
        query = f"?state=working&contextId=ctx-a&limit=2&cursor={cursor}"
    assert pages == wanted[::-1]
