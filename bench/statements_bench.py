"""Benchmark: what a follow-up's two statements cost PostgreSQL, without HTTP or an agent.

Runs the claim and the outcome statements the gateway runs for a follow-up, in a loop, on
one connection per concurrent caller, and prints PostgreSQL's CPU (its backends', from
/proc/<pid>/stat) and the wall time per follow-up. This is the floor the database sets under
`make bench`'s figures. Usage (the machine's PostgreSQL must be local for the CPU figure):
    python bench/statements_bench.py [--requests 4000] [--concurrency 1 4 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from a2a_continue.core.schema import migrate_url  # noqa: E402
from a2a_continue.core.tasks.claims import FREE_CLAIM  # noqa: E402
from a2a_continue.core.tasks.store import outcome_statement  # noqa: E402
from a2a_continue.runtime.db import _init_connection  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
OWNER = "bench@example.com"


def backend_cpu(pids: list[int]) -> float:
    """User + system CPU seconds of the given PostgreSQL backends."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


async def follow_up(conn: asyncpg.Connection, agent: uuid.UUID, task_id: str) -> None:
    """The two statements of one follow-up, as the gateway sends them."""
    claim = uuid.uuid4()
    args = (OWNER, [], False, agent, task_id, claim, None, 30.0, 5.0)
    row = await conn.fetchrow(FREE_CLAIM, *args)
    assert row is not None and row["claimed"], "the task could not be claimed"
    data = {"messageId": str(claim)}
    await conn.execute(
        outcome_statement(conn, whole_row=False), row["row_id"], "input-required", None, None,
        claim, 1,
        "task_continued", OWNER, data,
    )  # fmt: skip


async def measure(url: str, requests: int, concurrency: int) -> None:
    """Run ``requests`` follow-ups, ``concurrency`` tasks at once; print the costs."""
    conns = [await asyncpg.connect(url) for _ in range(concurrency)]
    for conn in conns:
        await _init_connection(conn)
    agent = uuid.uuid4()
    await conns[0].execute(
        "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner)"
        " VALUES ($1, 'bench', 'http://127.0.0.1:9/', '1.0', $2)",
        agent,
        OWNER,
    )
    tasks = [f"task-{uuid.uuid4().hex}" for _ in conns]
    for task_id in tasks:
        await conns[0].execute(
            "INSERT INTO a2a_tasks (agent_id, task_id, context_id, state, owner)"
            " VALUES ($1, $2, 'ctx', 'input-required', $3)",
            agent,
            task_id,
            OWNER,
        )

    async def run(count: int) -> None:
        async def caller(conn: asyncpg.Connection, task_id: str) -> None:
            for _ in range(count):
                await follow_up(conn, agent, task_id)

        await asyncio.gather(*(caller(c, t) for c, t in zip(conns, tasks, strict=True)))

    await run(max(1, 200 // concurrency))  # warm up: statements prepared, caches filled
    pids = [conn.get_server_pid() for conn in conns]
    cpu, began = backend_cpu(pids), time.perf_counter()
    per_caller = max(1, requests // concurrency)
    await run(per_caller)
    wall = time.perf_counter() - began
    done = per_caller * concurrency
    cpu = backend_cpu(pids) - cpu
    print(
        f"| {concurrency:2d} | {done / wall:7.0f} | {cpu * 1000 / done:6.3f} "
        f"| {wall * 1000 * concurrency / done:6.3f} |",
        flush=True,
    )
    for conn in conns:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()

    async def all_runs(url: str) -> None:
        await migrate_url(url)
        print("|  c | follow-ups/s | PostgreSQL CPU ms | wall ms per follow-up |")
        print("|---|---|---|---|")
        for concurrency in args.concurrency:
            await measure(url, args.requests, concurrency)

    given = os.environ.get("A2AC_DATABASE_URL")
    if given:
        asyncio.run(all_runs(given))
        return
    from a2a_continue.ops.embedded import embedded_database

    with (
        tempfile.TemporaryDirectory(prefix="a2ac-bench-") as tmp,
        embedded_database(Path(tmp)) as url,
    ):
        asyncio.run(all_runs(url))


if __name__ == "__main__":
    main()
