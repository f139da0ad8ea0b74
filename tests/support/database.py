"""The test databases: naming, creating and dropping them, and rows put in by hand."""

from __future__ import annotations

import os
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` on the same server."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def with_application_name(url: str, name: str) -> str:
    """``url`` whose connections show as ``name`` in pg_stat_activity (the URL may already
    carry a query, e.g. the embedded server's socket directory)."""
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


def direct_url(url: str) -> str:
    """``url``'s database, reached straight at PostgreSQL: when the run's statements go
    through a pooler (A2AC_DATABASE_URL), A2AC_LISTEN_DATABASE_URL says where PostgreSQL
    is. The tests' own connections (checks, rows put in by hand, LISTEN) take this way."""
    direct = os.environ.get("A2AC_LISTEN_DATABASE_URL")
    if not direct:
        return url
    return with_database(direct, urlsplit(url).path.lstrip("/"))


def statement_cache() -> int:
    """The run's A2AC_DB_STATEMENT_CACHE (0 when the run goes through a pooler)."""
    return int(os.environ.get("A2AC_DB_STATEMENT_CACHE") or 100)


def topology_env(database_url: str) -> dict[str, str]:
    """The topology settings of a gateway process on ``database_url``, as the run's."""
    env = {"A2AC_DB_STATEMENT_CACHE": str(statement_cache())}
    if os.environ.get("A2AC_LISTEN_DATABASE_URL"):
        env["A2AC_LISTEN_DATABASE_URL"] = direct_url(database_url)
    return env


async def create_database(url: str, name: str) -> None:
    conn = await asyncpg.connect(direct_url(url))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def drop_database(url: str, name: str) -> None:
    conn = await asyncpg.connect(direct_url(url))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def insert_agent(db: asyncpg.Connection, **changes: Any) -> uuid.UUID:
    """Insert an agent row straight into the database; return its id."""
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "name": "a",
        "endpoint_url": "http://127.0.0.1:9/",
        "protocol_version": "1.0",
        "owner": "alice@example.com",
        **changes,
    }
    columns = ", ".join(values)
    params = ", ".join(f"${i}" for i in range(1, len(values) + 1))
    await db.execute(f"INSERT INTO a2a_agents ({columns}) VALUES ({params})", *values.values())
    agent_id: uuid.UUID = values["id"]
    return agent_id


async def counts(db: asyncpg.Connection) -> tuple[int, int, int]:
    """How many agents, tasks and events the database holds."""
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM a2a_agents), (SELECT count(*) FROM a2a_tasks),"
        " (SELECT count(*) FROM a2a_task_events)"
    )
    assert row is not None
    return row[0], row[1], row[2]


async def claim_of(db: asyncpg.Connection, task_id: str) -> tuple[Any, Any]:
    row = await db.fetchrow(
        "SELECT token AS claim_token, expires_at AS claim_expires_at"
        f" FROM {TASKS_WITH_CLAIMS} WHERE task_id = $1",
        task_id,
    )
    assert row is not None
    return row["claim_token"], row["claim_expires_at"]


# Read a task's claim beside its row: select `token AS claim_token` (or `expires_at`) from this.
TASKS_WITH_CLAIMS = "a2a_tasks LEFT JOIN a2a_claims ON a2a_claims.task = a2a_tasks.id"


async def hold_claim(
    db: asyncpg.Connection, interval: str = "1 hour", task_id: str | None = None
) -> uuid.UUID:
    """Claim every task (or ``task_id``) as a follow-up in flight would, expiring ``interval``
    from now (a negative one: a holder that died); return the claim's token."""
    token = uuid.uuid4()
    await db.execute(
        "INSERT INTO a2a_claims (task, token, expires_at)"
        " SELECT id, $1, now() + $2::text::interval FROM a2a_tasks"
        " WHERE $3::text IS NULL OR task_id = $3"
        " ON CONFLICT (task) DO UPDATE"
        " SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at",
        token,
        interval,
        task_id,
    )
    return token
