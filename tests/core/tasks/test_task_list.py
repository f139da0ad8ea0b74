"""The caller's tasks across agents (GET /v1/a2a/tasks): scoping, filters, pages, plans."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import asyncpg
import pytest

from a2a_continue.core.tasks.listing import STATEMENTS
from tests.support.client import TASK_FIELDS, Client, assert_problem, register, token

BOB = token("bob@example.com", teams=["blue"])
CAROL = token("carol@example.com", teams=["red"])
ADMIN = token("root@example.com", admin=True)
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


async def add_task(
    db: asyncpg.Connection,
    agent: str,
    task_id: str,
    *,
    owner: str = "alice@example.com",
    state: str = "input-required",
    context: str | None = None,
    team: str | None = None,
    minute: int = 0,
) -> None:
    """Store a task as a start would have (the listing only reads rows)."""
    await db.execute(
        """INSERT INTO a2a_tasks (agent_id, task_id, context_id, state, owner, team_id,
                                  created_at, updated_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $7)""",
        uuid.UUID(agent),
        task_id,
        context,
        state,
        owner,
        team,
        T0 + dt.timedelta(minutes=minute),
    )


async def ids(client: Client, query: str = "", bearer: str | None = "") -> list[str]:
    r = await client.call("GET", f"/v1/a2a/tasks{query}", bearer=bearer)
    assert r.status == 200, r.raw
    return [t["id"] for t in r.json()["tasks"]]


async def two_agents(client: Client) -> tuple[str, str]:
    blue = client.as_(token(teams=["blue"]))
    a = await register(blue, "http://127.0.0.1:9/", visibility="team", teamId="blue")
    b = await register(client, "http://127.0.0.1:9/", version="0.3")
    return a, b


async def test_lists_the_callers_tasks_of_every_agent_newest_first(
    client: Client, db: asyncpg.Connection
) -> None:
    a, b = await two_agents(client)
    await add_task(db, a, "A1", minute=1)
    await add_task(db, b, "B1", minute=2)
    await add_task(db, a, "A2", minute=3)
    r = await client.call("GET", "/v1/a2a/tasks")
    assert r.status == 200, r.raw
    body = r.json()
    assert [t["id"] for t in body["tasks"]] == ["A2", "B1", "A1"]
    assert {t["agentId"] for t in body["tasks"]} == {a, b}
    assert set(body["tasks"][0]) == TASK_FIELDS
    assert body["nextCursor"] is None


async def test_shows_only_tasks_the_caller_may_see(client: Client, db: asyncpg.Connection) -> None:
    a, b = await two_agents(client)
    await add_task(db, a, "ALICE")
    await add_task(db, a, "BOB-OWN", owner="bob@example.com", minute=1)
    await add_task(db, a, "ALICE-BLUE", team="blue", minute=2)
    await add_task(db, b, "ALICE-BLUE-PRIVATE-AGENT", team="blue", minute=3)
    # bob sees his own and the team's task of the team agent, not alice's private agent
    assert await ids(client, bearer=BOB) == ["ALICE-BLUE", "BOB-OWN"]
    assert await ids(client, bearer=CAROL) == []
    assert len(await ids(client, bearer=ADMIN)) == 4


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("?state=completed", ["DONE"]),
        ("?state=TASK_STATE_COMPLETED", ["DONE"]),
        ("?contextId=c1", ["C1", "DONE"]),
        ("?state=input-required&contextId=c1", ["C1"]),
    ],
)
async def test_filters_by_state_and_context(
    client: Client, db: asyncpg.Connection, query: str, expected: list[str]
) -> None:
    a, b = await two_agents(client)
    await add_task(db, a, "DONE", state="completed", context="c1")
    await add_task(db, b, "C1", context="c1", minute=1)
    await add_task(db, b, "OTHER", context="c2", minute=2)
    assert await ids(client, query) == expected


async def test_filters_by_agent(client: Client, db: asyncpg.Connection) -> None:
    a, b = await two_agents(client)
    await add_task(db, a, "A1")
    await add_task(db, b, "B1", minute=1)
    assert await ids(client, f"?agentId={b}") == ["B1"]
    assert await ids(client, f"?agentId={uuid.uuid4()}") == []


async def test_agent_filter_of_an_invisible_agent_lists_nothing(
    client: Client, db: asyncpg.Connection
) -> None:
    _, private = await two_agents(client)
    await add_task(db, private, "B1", owner="bob@example.com")
    assert await ids(client, f"?agentId={private}", bearer=BOB) == []


async def test_admins_filter_by_owner(client: Client, db: asyncpg.Connection) -> None:
    a, _ = await two_agents(client)
    await add_task(db, a, "ALICE")
    await add_task(db, a, "BOB", owner="bob@example.com", minute=1)
    assert await ids(client, "?owner=bob@example.com", bearer=ADMIN) == ["BOB"]


async def test_owner_filter_is_403_for_a_caller_who_is_not_admin(client: Client) -> None:
    r = await client.call("GET", "/v1/a2a/tasks?owner=bob@example.com")
    assert "admin" in assert_problem(r, 403)["detail"]


@pytest.mark.parametrize(
    ("query", "loc"),
    [
        ("?state=sleeping", "$.query.state"),
        ("?agentId=not-a-uuid", "$.query.agentId"),
        ("?limit=0", "$.query.limit"),
        ("?cursor=bogus", "$.query.cursor"),
    ],
)
async def test_bad_query_parameters_are_422(client: Client, query: str, loc: str) -> None:
    r = await client.call("GET", f"/v1/a2a/tasks{query}")
    assert assert_problem(r, 422)["errors"][0]["loc"] == loc


async def test_pages_follow_the_cursor_without_gap_or_repeat(
    client: Client, db: asyncpg.Connection
) -> None:
    a, b = await two_agents(client)
    for i in range(7):
        await add_task(db, a if i % 2 else b, f"T{i}", minute=i // 2)  # equal times too
    seen: list[str] = []
    cursor = ""
    while True:
        r = await client.call("GET", f"/v1/a2a/tasks?limit=3&state=input-required{cursor}")
        body = r.json()
        seen += [t["id"] for t in body["tasks"]]
        if body["nextCursor"] is None:
            break
        cursor = f"&cursor={body['nextCursor']}"
    assert sorted(seen) == [f"T{i}" for i in range(7)]
    assert len(seen) == 7


def test_every_filter_shape_has_its_own_statement_without_optional_predicates() -> None:
    assert len(STATEMENTS) == 32
    assert len(set(STATEMENTS.values())) == 32
    for sql in STATEMENTS.values():
        assert "IS NULL OR" not in sql


async def _plan(db: asyncpg.Connection, sql: str, args: list[Any]) -> str:
    rows = await db.fetch(f"EXPLAIN {sql}", *args)
    return "\n".join(r[0] for r in rows)


async def test_no_filter_shape_scans_the_whole_task_table(db: asyncpg.Connection) -> None:
    agent = uuid.uuid4()
    await db.execute(
        """INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner, visibility)
           VALUES ($1, 'many', 'http://127.0.0.1:9/', '1.0', 'alice@example.com', 'public')""",
        agent,
    )
    await db.execute(
        """INSERT INTO a2a_tasks (agent_id, task_id, context_id, state, owner, team_id,
                                  created_at)
           SELECT $1, 't' || i, 'c' || (i % 5000),
                  (ARRAY['working', 'input-required', 'completed', 'failed'])[1 + i % 4],
                  'user' || (i % 2000) || '@example.com', 'team' || (i % 500),
                  now() - i * interval '1 second'
           FROM generate_series(1, 50000) AS i""",
        agent,
    )
    await db.execute("ANALYZE a2a_tasks")
    await db.execute("ANALYZE a2a_agents")
    values = ["completed", agent, "c7", "user7@example.com"]
    for shape, sql in STATEMENTS.items():
        args: list[Any] = [v for v, given in zip(values, shape, strict=False) if given]
        if shape[-1]:
            args += [dt.datetime.now(dt.UTC) - dt.timedelta(hours=3), uuid.uuid4()]
        for scope in (("user7@example.com", ["team7"], False), ("root", [], True)):
            plan = await _plan(db, sql, [*scope, *args, 51])
            assert "Seq Scan on a2a_tasks" not in plan, (shape, scope, plan)


async def test_listing_needs_the_read_permission(client: Client) -> None:
    r = await client.call("GET", "/v1/a2a/tasks", bearer=token(perms=["a2a.invoke"]))
    assert "a2a.read" in assert_problem(r, 403)["detail"]
