"""The contexts a start may name: `a2a_contexts`, and the rule that keeps one caller's
conversation with an agent out of another's.

An agent keeps its memory per context and sees one credential, the gateway's. So a start may
name a context only when it belongs to a task the caller can see (their own, their team's,
any for an admin), or when it is new to the agent: no task of the agent carries it and no
other caller named it first. A new context is recorded for the caller (and the start's team)
in the statement that decides, before the agent is called; the table's primary key makes the
first of two starts naming it at once its holder, and the other gets the 404 of a context it
cannot see.
"""

from __future__ import annotations

import datetime as dt
import uuid

from a2a_continue.core.access.callers import CONTEXT_VISIBLE, TASK_VISIBLE, Caller
from a2a_continue.errors import NotFound
from a2a_continue.runtime.db import Conn

# $1-$3 the caller's scope, $4 the agent, $5 the context, $6 the start's team. `visible`: a
# task or a naming the caller can see has it; `known`: any has it; `named`: this statement
# recorded it for the caller (a start that raced this one may have recorded it first: its row
# is then not in this statement's snapshot, and the insert does nothing).
JOIN_CONTEXT = f"""
WITH seen AS (
    SELECT EXISTS (SELECT 1 FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
                   WHERE t.agent_id = $4 AND t.context_id = $5 AND {TASK_VISIBLE})
        OR EXISTS (SELECT 1 FROM a2a_contexts c
                   WHERE c.agent_id = $4 AND c.context_id = $5 AND {CONTEXT_VISIBLE}) AS visible,
           EXISTS (SELECT 1 FROM a2a_tasks t WHERE t.agent_id = $4 AND t.context_id = $5)
        OR EXISTS (SELECT 1 FROM a2a_contexts c
                   WHERE c.agent_id = $4 AND c.context_id = $5) AS known
), named AS (
    INSERT INTO a2a_contexts (agent_id, context_id, owner, team_id)
    SELECT $4, $5, $1, $6 FROM seen WHERE NOT seen.known
    ON CONFLICT (agent_id, context_id) DO NOTHING
    RETURNING true
)
SELECT seen.visible, seen.known, EXISTS (SELECT 1 FROM named) AS named FROM seen
"""

# Namings older than $1 that no task of their agent carries any more, a batch at a time.
PRUNE_CONTEXTS = """
DELETE FROM a2a_contexts c WHERE (c.agent_id, c.context_id) IN (
    SELECT o.agent_id, o.context_id FROM a2a_contexts o
    WHERE o.created_at < $1 AND NOT EXISTS (
        SELECT 1 FROM a2a_tasks t WHERE t.agent_id = o.agent_id AND t.context_id = o.context_id)
    ORDER BY o.created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
"""


async def join_context(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, context_id: str, team_id: str | None
) -> None:
    """Let a start name ``context_id`` (recording it for the caller when it is new to the
    agent), or raise 404 as for a task the caller cannot see, saying nobody's name."""
    for _ in range(2):
        row = await conn.fetchrow(JOIN_CONTEXT, *caller.scope_args(), agent_id, context_id, team_id)
        assert row is not None
        if row["visible"] or row["named"]:
            return
        if row["known"]:
            break
        # A start naming it committed after this statement's snapshot: look once more.
    raise NotFound(
        f"context {context_id!r} not found: a start may name the context of a task you can "
        "see, or a context new to this agent"
    )


async def prune_contexts(conn: Conn, cutoff: dt.datetime, batch: int = 500) -> int:
    """Remove namings older than ``cutoff`` whose agent has no task in them; return how many."""
    removed = 0
    while True:
        status = await conn.execute(PRUNE_CONTEXTS, cutoff, batch)
        count = int(status.split()[-1])
        removed += count
        if count < batch:
            return removed
