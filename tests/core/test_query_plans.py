"""Every read route's and background sweep's statement keeps its cost flat as the tables grow:
over seeded tables, none of their plans (custom or generic) scans a2a_tasks or
a2a_task_events sequentially, and none reads more than a page's worth of their rows (run
with EXPLAIN ANALYZE in a transaction that is rolled back).

The statements are imported from the modules that run them, so this checks what runs. To
cover a new statement, add a row to PLANS: (name, statement, arguments from the seed).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg

from a2a_continue.core.idempotency import keys as idempotency_keys
from a2a_continue.core.tasks import claims, contexts, retention, watches
from a2a_continue.core.tasks import listing as task_list
from a2a_continue.core.tasks import reads as task_reads
from a2a_continue.core.tasks.event_stream import READ_EVENTS, READ_TASK_EVENTS
from a2a_continue.core.tasks.interest import KEEP_INTEREST, POLL
from a2a_continue.core.tasks.reads import LIST_TASKS
from tests.support.plans import rows_read

ALICE = "alice@example.com"
SCANNED = {"a2a_tasks", "a2a_task_events"}
TASKS, EVENTS_EACH, LONG = 40_000, 10, 30_000
# Rows of the task tables one statement may read (a page is 200 at most; a sweep's batch 500).
MAX_ROWS = 2_000


@dataclass(frozen=True)
class Seed:
    """What the seeded tables hold that the statements need as arguments."""

    agent: uuid.UUID
    long_row: uuid.UUID  # the task with LONG events, task id 'long'
    deep_at: dt.datetime  # a cursor deep in the agent's listing
    deep_id: uuid.UUID
    context: str  # a context with a few tasks
    waited: list[uuid.UUID]  # tasks streams wait on

    @property
    def scope(self) -> tuple[str, list[str], bool]:
        return ALICE, [], False


Args = Callable[[Seed], tuple[Any, ...]]


def _lists() -> Iterator[tuple[str, str, Args]]:
    for (state, context, cursor), statement in LIST_TASKS.items():
        for value in ("working", "completed") if state else (None,):
            name = f"list state={value} context={context} cursor={cursor}"

            def args(s: Seed, value: str | None = value, context: bool = context,
                     cursor: bool = cursor) -> tuple[Any, ...]:  # fmt: skip
                filters = [v for v in (value, s.context if context else None) if v is not None]
                keyset = [s.deep_at, s.deep_id] if cursor else []
                return (*s.scope, s.agent, *filters, *keyset, 51)

            yield name, statement, args


def _all_lists() -> Iterator[tuple[str, str, Args]]:
    """Each shape of the listing across agents (GET /v1/a2a/tasks), filters in FILTERS order."""
    for shape, statement in task_list.STATEMENTS.items():
        given = [name for (name, _), on in zip(task_list.FILTERS, shape, strict=False) if on]
        name = f"list across agents {'+'.join(given) or 'unfiltered'} cursor={shape[-1]}"

        def args(s: Seed, shape: tuple[bool, ...] = shape) -> tuple[Any, ...]:
            values = ("working", s.agent, s.context, ALICE)
            filters = [v for v, on in zip(values, shape, strict=False) if on]
            keyset = [s.deep_at, s.deep_id] if shape[-1] else []
            return (*s.scope, *filters, *keyset, 51)

        yield name, statement, args


PLANS: list[tuple[str, str, Args]] = [
    *_lists(),
    *_all_lists(),
    ("get", task_reads.FIND_TASK, lambda s: (*s.scope, s.agent, "long")),
    ("events first page", task_reads.LIST_EVENTS, lambda s: (s.long_row, 0, 200)),
    ("events after near the end", task_reads.LIST_EVENTS, lambda s: (s.long_row, LONG - 50, 200)),
    ("stream replay", READ_EVENTS, lambda s: (*s.scope, s.agent, "long", 0, 200)),
    ("stream read near the end", READ_EVENTS, lambda s: (*s.scope, s.agent, "long", LONG - 5, 200)),
    ("stream shared read", READ_TASK_EVENTS, lambda s: (s.long_row, 0, 200)),
    ("stream shared read near the end", READ_TASK_EVENTS, lambda s: (s.long_row, LONG - 5, 200)),
    ("hub poll", POLL, lambda s: (s.waited, [0] * len(s.waited), [None] * len(s.waited))),
    ("hub interest", KEEP_INTEREST, lambda s: (s.waited, uuid.uuid4(), 60.0)),
    ("watcher pick-up", watches.PICK_UP, lambda s: (10, 30.0)),
    ("watcher renew", watches.RENEW, lambda s: (s.waited, [uuid.uuid4()] * len(s.waited), 30.0)),
    ("free claim", claims.FREE_CLAIM,
     lambda s: (*s.scope, s.agent, "long", uuid.uuid4(), None, 30.0, 5.0)),
    ("claim", claims.CLAIM_TASK,
     lambda s: (*s.scope, s.agent, "long", uuid.uuid4(), None, 30.0, 5.0, "a2a-continue")),
    ("claims sweep", claims.SWEEP_EXPIRED_CLAIMS, lambda s: ("a2a-continue", 500)),
    ("row claims sweep", claims.SWEEP_EXPIRED_ROW_CLAIMS, lambda s: ("a2a-continue", 500)),
    ("idempotency sweep", idempotency_keys.SWEEP, lambda s: (1000,)),
    ("retention batch", retention.PRUNE_BATCH,
     lambda s: (dt.datetime.now(dt.UTC) - dt.timedelta(days=30), 500, 20_000)),
    # The statement trigger of sql/0011_lean_writes.sql that deletes a deleted task's events
    # (its transition table `gone` stands in as a subquery of the same shape).
    ("events of deleted tasks", "DELETE FROM a2a_task_events e WHERE e.task = ANY (ARRAY("
     "SELECT g.id FROM (SELECT id FROM a2a_tasks WHERE id = $1) g))", lambda s: (s.deep_id,)),
    ("start naming a context", contexts.JOIN_CONTEXT,
     lambda s: ("bob@example.com", [], False, s.agent, s.context, None)),
    ("start naming a new context", contexts.JOIN_CONTEXT,
     lambda s: (*s.scope, s.agent, "ctx-new", None)),
    ("referenced tasks", task_reads.VISIBLE_TASK_IDS, lambda s: (*s.scope, s.agent, ["t1", "t2"])),
    ("contexts sweep", contexts.PRUNE_CONTEXTS,
     lambda s: (dt.datetime.now(dt.UTC) - dt.timedelta(days=30), 500)),
    ("retention dry run", retention.COUNT_DUE,
     lambda s: (dt.datetime.now(dt.UTC) - dt.timedelta(days=30),)),
]  # fmt: skip

# Statements whose reads grow with what they count, and why that is fine.
UNBOUNDED = {"retention dry run": "the CLI's count of what a prune would delete"}


async def seed_tables(db: asyncpg.Connection) -> Seed:
    """TASKS tasks of one agent (most completed, some live; a context per 8 tasks), EVENTS_EACH
    events each, one task with LONG events, and a few other agents' tasks."""
    agent, other = uuid.uuid4(), uuid.uuid4()
    for a in (agent, other):
        await db.execute(
            "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner)"
            " VALUES ($1, 'a', 'http://127.0.0.1:9/', '1.0', $2)",
            a,
            ALICE,
        )
    await db.execute(
        """
        INSERT INTO a2a_tasks (agent_id, task_id, context_id, state, owner, created_at,
                               updated_at, completed_at, last_seq)
        SELECT CASE WHEN i % 10 = 0 THEN $2::uuid ELSE $1::uuid END, 't' || i, 'ctx-' || (i / 8),
               CASE WHEN i % 50 = 0 THEN 'working' WHEN i % 50 = 1 THEN 'input-required'
                    ELSE 'completed' END, $3, at, at, CASE WHEN i % 50 > 1 THEN at END, $5
        FROM generate_series(1, $4::int) AS i,
             LATERAL (SELECT now() - make_interval(secs => ($4::int - i) * 60) AS at) AS stamp
        """,
        agent,
        other,
        ALICE,
        TASKS,
        EVENTS_EACH,
    )  # fmt: skip
    long_row = await db.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, last_seq)"
        " VALUES ($1, 'long', 'working', $2, $3) RETURNING id",
        agent,
        ALICE,
        LONG,
    )
    await db.execute(
        """
        INSERT INTO a2a_task_events (task, seq, type, new_state, actor)
        SELECT t.id, s, 'task_updated', t.state, t.owner
        FROM a2a_tasks t, generate_series(1, t.last_seq) AS s
        """
    )
    await db.execute("ANALYZE a2a_agents, a2a_tasks, a2a_task_events")
    deep = await db.fetchrow(
        "SELECT created_at, id FROM a2a_tasks WHERE agent_id = $1"
        " ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1",
        agent,
        TASKS // 2,
    )
    waited = [r["id"] for r in await db.fetch("SELECT id FROM a2a_tasks LIMIT 100")]
    return Seed(agent, long_row, deep["created_at"], deep["id"], "ctx-100", waited)


def literal(value: Any) -> str:
    """A value as an untyped SQL literal (EXECUTE casts it to the parameter's type)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "'true'" if value else "'false'"
    if isinstance(value, list):
        value = "{" + ",".join(str(v) for v in value) + "}"
    elif isinstance(value, dt.datetime):
        value = value.isoformat()
    return "'" + str(value).replace("'", "''") + "'"


def seq_scans(plan: Any) -> list[str]:
    """The tables of SCANNED a plan (EXPLAIN JSON) reads sequentially."""
    found = []
    if isinstance(plan, dict):
        if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") in SCANNED:
            found.append(plan["Relation Name"])
        for value in plan.values():
            found += seq_scans(value)
    elif isinstance(plan, list):
        for value in plan:
            found += seq_scans(value)
    return found


async def test_no_read_route_or_sweep_scans_the_task_tables_sequentially(
    db: asyncpg.Connection,
) -> None:
    seed = await seed_tables(db)
    failures = []
    for name, statement, args in PLANS:
        values = args(seed)
        # The generic plan too: the one a prepared statement settles on after a few runs.
        literals = ", ".join(literal(v) for v in values)
        await db.execute(f"PREPARE plan_check AS {statement}")
        tx = db.transaction()
        await tx.start()
        try:
            custom = await db.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", *values)
            await db.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            generic = await db.fetchval(
                f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE plan_check({literals})"
            )
        finally:
            await tx.rollback()  # what a statement wrote is undone
            await db.execute("DEALLOCATE plan_check")
        for kind, plan in (("custom", custom), ("generic", generic)):
            scanned = seq_scans(plan)
            if scanned:
                failures.append(f"{name} ({kind} plan): Seq Scan on {', '.join(scanned)}")
            read = rows_read(plan, SCANNED)
            if read > MAX_ROWS and name not in UNBOUNDED:
                failures.append(f"{name} ({kind} plan): read {read} rows of the task tables")
    assert failures == []
