"""The stream-interest rows (`a2a_stream_interest`, owned here): the fragments event writers
add to notify a waiting stream (on any replica), and the statements the hub keeps its rows
with (`INTEREST_ROWS`, handed to runtime.hub.Hub)."""

from __future__ import annotations

import uuid

from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.hub import AGENT_PREFIX, EVENTS_CHANNEL


def notify_sql(task_expr: str) -> str:
    """SQL notifying the events channel with the task ``task_expr`` names, if a stream waits.

    Only a task with an unexpired row in `a2a_stream_interest` (each process's hub keeps one
    per task its streams wait on) is notified: a NOTIFY holds a database-wide lock until its
    commit is flushed, so notifying commits queue behind each other, and most tasks have no
    stream waiting. The value is NULL either way. Qualify ``task_expr`` (``appended.task``):
    a bare ``task`` would name the interest row's own column inside the subquery.
    """
    return (
        "CASE WHEN EXISTS (SELECT 1 FROM a2a_stream_interest i"
        f" WHERE i.task = {task_expr} AND i.expires_at > now())"
        f" THEN pg_notify('{EVENTS_CHANNEL}', {task_expr}::text) END"
    )


def notify_agent_sql(agent_expr: str) -> str:
    """SQL notifying the events channel that the agent ``agent_expr`` names changed, when a
    stream waits on one of its tasks; evaluate it in the statement that changes the agent
    (its snapshot still sees the interest rows a cascade deletes)."""
    return (
        "CASE WHEN EXISTS (SELECT 1 FROM a2a_stream_interest i JOIN a2a_tasks t ON t.id = i.task"
        f" WHERE t.agent_id = {agent_expr} AND i.expires_at > now())"
        f" THEN pg_notify('{EVENTS_CHANNEL}', '{AGENT_PREFIX}' || {agent_expr}::text) END"
    )


# Who may see a task, as one value: a stream whose task's value changed re-checks its caller.
SCOPE_SQL = "md5(concat_ws(chr(31), t.owner, t.team_id, a.owner, a.visibility, a.team_id))"

# The one fallback poll of a process: for each task its streams wait on ($1), the least seq
# they saw ($2) and the scope they saw ($3; NULL when they disagree), the tasks with news:
# events past that seq, another scope, or no row (the task is gone). Only those come back.
POLL = f"""SELECT w.id, t.last_seq, {SCOPE_SQL} AS scope
FROM unnest($1::uuid[], $2::int[], $3::text[]) AS w (id, seen, scope)
LEFT JOIN a2a_tasks t ON t.id = w.id LEFT JOIN a2a_agents a ON a.id = t.agent_id
WHERE t.id IS NULL OR t.last_seq > w.seen OR {SCOPE_SQL} IS DISTINCT FROM w.scope"""

# Write (or extend) this process's interest rows for the tasks in $1. The join leaves out a
# task already deleted; one deleted while the statement runs fails the foreign key (_keep).
KEEP_INTEREST = """INSERT INTO a2a_stream_interest (task, process, expires_at)
SELECT t.id, $2, now() + make_interval(secs => $3)
FROM unnest($1::uuid[]) AS w (id) JOIN a2a_tasks t ON t.id = w.id
ON CONFLICT (task, process) DO UPDATE SET expires_at = EXCLUDED.expires_at"""

DROP_INTEREST = "DELETE FROM a2a_stream_interest WHERE process = $1 AND task = ANY($2::uuid[])"

DROP_ALL_INTEREST = "DELETE FROM a2a_stream_interest WHERE process = $1"

# Rows of a process that died without deleting them: expired, they no longer cause notifies;
# any hub's refresh deletes them a while later.
SWEEP_INTEREST = "DELETE FROM a2a_stream_interest WHERE expires_at < now() - interval '5 minutes'"


class InterestRowStatements:
    """This table's statements as the hub runs them (runtime.hub.InterestRows)."""

    async def prepare(self, conn: Conn) -> None:
        # Interest rows are soft state (one lost in a crash costs a poll interval at most),
        # so their commits need not wait for the WAL flush. Set in the session, not as a
        # startup parameter, which a pooler would refuse before the hub could say why.
        await conn.execute("SET synchronous_commit = off")

    async def keep(
        self, conn: Conn, tasks: list[uuid.UUID], process: uuid.UUID, ttl_s: float
    ) -> None:
        await conn.execute(KEEP_INTEREST, tasks, process, ttl_s)

    async def drop(self, conn: Conn, process: uuid.UUID, tasks: list[uuid.UUID]) -> None:
        await conn.execute(DROP_INTEREST, process, tasks)

    async def drop_all(self, conn: Conn, process: uuid.UUID) -> None:
        await conn.execute(DROP_ALL_INTEREST, process)

    async def sweep(self, conn: Conn) -> None:
        await conn.execute(SWEEP_INTEREST)

    async def news(
        self, conn: Conn, ids: list[uuid.UUID], seen: list[int], scopes: list[str | None]
    ) -> list[Record]:
        return list(await conn.fetch(POLL, ids, seen, scopes))


INTEREST_ROWS = InterestRowStatements()
