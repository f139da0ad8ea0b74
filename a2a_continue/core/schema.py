"""The schema: the numbered migrations in `sql/`, applied once each, in order, by whichever
process gets to them first (`schema_migrations` records them)."""

from __future__ import annotations

import logging
from pathlib import Path

import asyncpg

from a2a_continue.runtime.db import Conn

log = logging.getLogger(__name__)

# Any 64-bit number held only by this service; serializes migrations across replicas.
MIGRATION_LOCK_ID = 7_311_052_001


def sql_dir() -> Path:
    """Return the folder holding the numbered migrations (in the wheel or the checkout)."""
    package = Path(__file__).parent.parent
    packaged = package / "sql"
    return packaged if packaged.is_dir() else package.parent / "sql"


def migration_files() -> list[Path]:
    """List the migrations in the order they apply."""
    return sorted(sql_dir().glob("[0-9][0-9][0-9][0-9]_*.sql"))


MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


async def migrate(conn: Conn) -> list[str]:
    """Apply each migration not yet recorded, each in its own transaction; return those applied.

    Each transaction takes the migrations' lock for itself (``pg_advisory_xact_lock``), so
    replicas starting together apply each file once, straight to PostgreSQL or through a
    pooler in transaction mode (where a session's lock could be taken in one server session
    and released in another).
    """
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_ID)
        await conn.execute(MIGRATIONS_TABLE)
        done = {row["version"] for row in await conn.fetch("SELECT version FROM schema_migrations")}
    for path in migration_files():
        if path.stem in done:
            continue
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_ID)
            # Another process may have applied it while this one waited for the lock.
            if await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", path.stem
            ):
                continue
            await conn.execute(path.read_text())
            await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", path.stem)
        log.info("applied migration %s", path.stem)
        applied_now.append(path.stem)
    return applied_now


async def migrate_url(url: str, statement_cache: int = 100) -> list[str]:
    """Connect to ``url`` and apply the pending migrations."""
    conn = await asyncpg.connect(url, statement_cache_size=statement_cache)
    try:
        return await migrate(conn)
    finally:
        await conn.close()
