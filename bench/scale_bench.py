"""Benchmark: how the read routes' cost grows with the data, and what many live streams cost.

Data size: one database is seeded with generate_series to 10k, then 100k, then 1M tasks
(~10 events each; 90 % of them one agent's, a context per 4 tasks, 4 % live) plus one task
with 100k events, and at each size every read route is timed through a real gateway
(``a2a-continue serve``): p50/p99 and the ratio of each p50 to its p50 at 10k. The p50s are
drawn (against the size, one line per route) to ``docs/scale.svg``.

Streams: the same gateway then holds ``--streams`` idle live event streams on ``--tasks``
tasks (1,000 of them on one task, the rest spread evenly over the others); printed are its RSS
per stream, its database connections, the database's transactions per second while the streams
idle (``pg_stat_database``, over ``--idle-s``, opened once the gateway is quiet and PostgreSQL
has reported the streams' first reads), the longest answer of a ``/healthz`` probe (another
process, every 20 ms: the gateway's stalls), and the time from an event's commit to its
arrival on each of the 1,000 streams of its task (p50/p99, 10 rounds).

The machine is shared and noisy: compare the ratios, not the milliseconds. Usage:
    python bench/scale_bench.py [--sizes 10000,100000,1000000] [--streams 10000] [--tasks 1000]
                                [--idle-s 60] [--settle-s S] [--streams-only] [--quick]
A2AC_DATABASE_URL names the server (a database ``a2ac_scale_bench`` is made on it and
dropped at the end); without it an embedded PostgreSQL is started.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from continue_bench import cpu_seconds, database, free_port, percentile, process

from a2a_continue.core.access.callers import mint_token
from a2a_continue.core.schema import migrate_url
from a2a_continue.core.shapes.pagination import encode_cursor
from a2a_continue.core.tasks.store import append_event
from a2a_continue.runtime.secrets import new_key

ROOT = Path(__file__).resolve().parent.parent
SECRET = "scale-bench-secret-of-at-least-32-bytes"
ALICE = "alice@example.com"
LONG = 100_000
DB_NAME = "a2ac_scale_bench"


# ---- seeding ------------------------------------------------------------------------------

# Tasks $4..$5 (90 % of them the first agent's) with 10 events each, in one statement. The
# seeded agents do not answer: their working tasks are as if the watcher had given up on
# them, so that it does not poll them through the measurements.
SEED = """
WITH new AS (
    INSERT INTO a2a_tasks (agent_id, task_id, context_id, state, owner, created_at, updated_at,
                           completed_at, last_seq, watch_failed_at)
    SELECT CASE WHEN i % 10 = 0 THEN $2::uuid ELSE $1::uuid END, 't' || i, 'ctx-' || (i / 4),
           CASE WHEN i % 50 = 0 THEN 'working' WHEN i % 50 = 1 THEN 'input-required'
                WHEN i % 50 = 2 THEN 'failed' ELSE 'completed' END,
           $3, at, at, CASE WHEN i % 50 > 1 THEN at END, 10, CASE WHEN i % 50 = 0 THEN at END
    FROM generate_series($4::int, $5::int) AS i,
         LATERAL (SELECT timestamptz '2026-01-01' + make_interval(secs => i) AS at) AS stamp
    RETURNING id, state, owner, last_seq
)
INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor, data)
SELECT new.id, s, CASE WHEN s = 1 THEN 'task_created' ELSE 'task_updated' END,
       'working', new.state, new.owner, jsonb_build_object('n', s)
FROM new, generate_series(1, new.last_seq) AS s
"""


async def seed_to(conn: asyncpg.Connection, agents: tuple[uuid.UUID, uuid.UUID], have: int,
                  want: int) -> None:  # fmt: skip
    """Grow the seeded tasks from ``have`` to ``want`` (with their events), in chunks."""
    step = 100_000
    for low in range(have + 1, want + 1, step):
        high = min(low + step - 1, want)
        async with conn.transaction():
            # Bulk load: the foreign-key triggers are skipped (the rows are consistent).
            await conn.execute("SET LOCAL session_replication_role = replica")
            await conn.execute(SEED, *agents, ALICE, low, high)
    await conn.execute("VACUUM ANALYZE a2a_tasks")
    await conn.execute("VACUUM ANALYZE a2a_task_events")


async def seed_base(conn: asyncpg.Connection) -> tuple[uuid.UUID, uuid.UUID]:
    """Two agents of alice's and the task with LONG events; return the agents."""
    agents = (uuid.uuid4(), uuid.uuid4())
    for agent in agents:
        await conn.execute(
            "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner)"
            " VALUES ($1, 'bench', 'http://127.0.0.1:9/', '1.0', $2)",
            agent,
            ALICE,
        )
    row = await conn.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, context_id, state, owner, last_seq,"
        " watch_failed_at) VALUES ($1, 'long', 'ctx-long', 'working', $2, $3, now()) RETURNING id",
        agents[0],
        ALICE,
        LONG,
    )
    await conn.execute(
        "INSERT INTO a2a_task_events (task, seq, type, new_state, actor)"
        " SELECT $1, s, 'task_updated', 'working', $2 FROM generate_series(1, $3) AS s",
        row,
        ALICE,
        LONG,
    )
    return agents


# ---- the routes ---------------------------------------------------------------------------


async def route_paths(conn: asyncpg.Connection, agent: uuid.UUID, size: int) -> dict[str, str]:
    """Each read route, as a path with its query, at the current size."""
    deep = await conn.fetchrow(
        "SELECT created_at, id FROM a2a_tasks WHERE agent_id = $1"
        " ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1",
        agent,
        int(size * 0.9) // 2,
    )
    cursor = encode_cursor(deep["created_at"], deep["id"])
    base = f"/v1/a2a/{agent}"
    middle = f"ctx-{size // 8}"
    return {
        "list": f"{base}/tasks",
        "list deep cursor": f"{base}/tasks?cursor={cursor}",
        "list state": f"{base}/tasks?state=working",
        "list state deep cursor": f"{base}/tasks?state=completed&cursor={cursor}",
        "list contextId": f"{base}/tasks?contextId={middle}",
        "list state+contextId": f"{base}/tasks?state=completed&contextId={middle}",
        "get": f"{base}/tasks/t{size // 2 + 1}",
        "events": f"{base}/tasks/long/events",
        "events after near the end": f"{base}/tasks/long/events?after={LONG - 50}",
        "stream replay": f"{base}/tasks/long/events{STREAMED}",
    }


# The stream replay is timed until its first 200 events have arrived.
STREAMED = "?after=0&stream"


async def time_route(
    http: aiohttp.ClientSession, base: str, path: str, headers: dict[str, str], n: int
) -> list[float]:
    """Time ``n`` sequential GETs of ``path`` (a stream: until its first 200 events)."""
    stream = path.endswith(STREAMED)
    times = []
    for i in range(n + n // 10):
        start = time.perf_counter()
        if stream:
            sse = {**headers, "Accept": "text/event-stream"}
            async with http.get(base + path, headers=sse) as r:
                assert r.status == 200, r.status
                seen = 0
                async for line in r.content:
                    seen += line.startswith(b"id:")
                    if seen == 200:
                        break
        else:
            async with http.get(base + path, headers=headers) as r:
                assert r.status == 200, (path, r.status, await r.text())
                await r.read()
        if i >= n // 10:  # the first tenth warms up
            times.append(time.perf_counter() - start)
    return sorted(times)


# ---- streams ------------------------------------------------------------------------------


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


PROBE = """
import sys, time, urllib.request
while True:
    start = time.perf_counter()
    urllib.request.urlopen(sys.argv[1], timeout=30).read()
    print(time.time(), time.perf_counter() - start, flush=True)
    time.sleep(0.02)
"""


def start_probe(url: str, log: Path) -> subprocess.Popen[str]:
    """Probe ``url`` every 20 ms from another process until stopped (its stalls), to ``log``
    (a file: a pipe nobody reads would fill and block the probe)."""
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-c", PROBE, url], stdout=out, text=True)


def probe_worst(probe: subprocess.Popen[str], log: Path, phases: list[float]) -> list[float]:
    """Stop the probe; the longest answer (s) between each two consecutive ``phases`` times."""
    probe.terminate()
    probe.wait(60)
    out = log.read_text()
    samples = [tuple(map(float, line.split())) for line in out.splitlines() if line.strip()]
    worst = []
    for start, end in itertools.pairwise(phases):
        worst.append(max((lag for at, lag in samples if start <= at < end), default=0.0))
    return worst


# PostgreSQL adds a backend's counts to pg_stat_database at most once a second, and those of
# a backend's last second of work before it idles only 10 s later (PGSTAT_IDLE_INTERVAL): a
# window that opens sooner than that after the streams' first reads counts those reads in it.
REPORT_LAG_S = 12.0
# The gateway is done with the streams' first reads once its CPU stays under this share of a
# core (idle, the keep-alives cost about a tenth) for QUIET_S.
QUIET_CPU = 0.3
QUIET_S = 2.0


async def settle(gw_pid: int, fixed_s: float | None) -> float:
    """Wait until the window may open: ``fixed_s``, else until the gateway has been quiet
    for QUIET_S (at most 120 s) and then REPORT_LAG_S. Return the seconds waited."""
    started = time.perf_counter()
    if fixed_s is not None:
        await asyncio.sleep(fixed_s)
        return fixed_s
    quiet_since = time.perf_counter()
    while time.perf_counter() - started < 120:
        cpu = cpu_seconds(gw_pid)
        await asyncio.sleep(0.5)
        if (cpu_seconds(gw_pid) - cpu) / 0.5 > QUIET_CPU:
            quiet_since = time.perf_counter()
        elif time.perf_counter() - quiet_since >= QUIET_S:
            break
    await asyncio.sleep(REPORT_LAG_S)
    return time.perf_counter() - started


async def transactions(conn: asyncpg.Connection) -> int:
    """Transactions the bench database has counted so far (``pg_stat_database``)."""
    value = await conn.fetchval(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", DB_NAME
    )
    return int(value)


async def gateway_connections(conn: asyncpg.Connection) -> int:
    value = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        DB_NAME,
    )
    return int(value)


class Streams:
    """Many SSE readers in this process; each notes when each event id arrives."""

    def __init__(self, http: aiohttp.ClientSession, base: str, headers: dict[str, str]):
        self.http, self.base = http, base
        self.headers = {**headers, "Accept": "text/event-stream"}
        self.arrived: dict[str, list[float]] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.opened = 0

    async def _read(self, path: str, ready: asyncio.Event) -> None:
        async with self.http.get(self.base + path, headers=self.headers) as r:
            assert r.status == 200, r.status
            self.opened += 1
            ready.set()
            async for line in r.content:
                if line.startswith(b"id:"):
                    now = time.perf_counter()
                    self.arrived.setdefault(line[3:].strip().decode(), []).append(now)

    async def open(self, paths: list[str], at_once: int = 50) -> None:
        gate = asyncio.Semaphore(at_once)

        async def one(path: str) -> None:
            async with gate:
                ready = asyncio.Event()
                self.tasks.append(asyncio.create_task(self._read(path, ready)))
                await ready.wait()

        await asyncio.gather(*(one(p) for p in paths))

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def measure_streams(
    url: str, base: str, gw_pid: int, headers: dict[str, str], count: int, fanout: int,
    tasks: int, idle_s: float, settle_s: float | None,
) -> dict[str, Any]:  # fmt: skip
    conn = await asyncpg.connect(url)
    try:
        await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads,
                                  schema="pg_catalog")  # fmt: skip
        agent = await conn.fetchval(
            "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner)"
            " VALUES (gen_random_uuid(), 'streams', 'http://127.0.0.1:9/', '1.0', $1)"
            " RETURNING id",
            ALICE,
        )
        # The streams off the hot task s0, spread evenly over the other tasks.
        others = count - fanout
        spread = max(1, min(tasks - 1, others))
        await conn.execute(
            "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, last_seq)"
            " SELECT $1, 's' || i, 'input-required', $2, 0 FROM generate_series(0, $3) AS i",
            agent,
            ALICE,
            spread,
        )
        hot = await conn.fetchval("SELECT id FROM a2a_tasks WHERE agent_id = $1 AND task_id = 's0'",
                                  agent)  # fmt: skip
        paths = [f"/v1/a2a/{agent}/tasks/s{1 + i % spread}/events" for i in range(others)]
        paths += [f"/v1/a2a/{agent}/tasks/s0/events"] * fanout
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
        ) as http:
            rss_before, conns_before = rss_kb(gw_pid), await gateway_connections(conn)
            streams = Streams(http, base, headers)
            started = time.perf_counter()
            probe_log = Path(os.environ.get("TMPDIR", "/tmp")) / f"a2ac-probe-{gw_pid}.log"
            probe = start_probe(base + "/healthz", probe_log)
            phases = [time.time()]
            await streams.open(paths)
            phases.append(time.time())
            opened_s = time.perf_counter() - started
            # The hub records its interest in every task and the streams' first reads end.
            settled_s = await settle(gw_pid, settle_s)
            rss_open, conns_open = rss_kb(gw_pid), await gateway_connections(conn)
            before, cpu_before = await transactions(conn), cpu_seconds(gw_pid)
            await asyncio.sleep(idle_s)
            # Less the bench's own reading of the count (one transaction).
            idle_tps = (await transactions(conn) - before - 1) / idle_s
            idle_cpu = (cpu_seconds(gw_pid) - cpu_before) / idle_s * 100
            phases.append(time.time())
            # Fan-out: an event on the task 1,000 streams wait on, ten times.
            delays: list[float] = []
            for n in range(10):
                committed = time.perf_counter()
                seq = await append_event(conn, hot, "task_updated", "working", "working", ALICE,
                                         {"n": n})  # fmt: skip
                deadline = time.perf_counter() + 30
                while len(streams.arrived.get(str(seq), ())) < fanout:
                    if time.perf_counter() > deadline:
                        break
                    await asyncio.sleep(0.005)
                got = streams.arrived.get(str(seq), [])
                delays += [t - committed for t in got]
                delays += [30.0] * (fanout - len(got))  # never arrived: counted as 30 s
                await asyncio.sleep(1)
            phases.append(time.time())
            stalls = probe_worst(probe, probe_log, phases)
            rss_idle = rss_kb(gw_pid)
            await streams.close()
            await asyncio.sleep(5)
            rss_closed = rss_kb(gw_pid)
        delays.sort()
        return {
            "streams": streams.opened,
            "open_s": opened_s,
            "rss_before_kb": rss_before,
            "rss_open_kb": rss_open,
            "rss_idle_kb": rss_idle,
            "rss_closed_kb": rss_closed,
            "rss_per_stream_kb": (rss_idle - rss_before) / max(streams.opened, 1),
            "db_connections": (conns_before, conns_open),
            "tasks": spread + 1,
            "idle_settle_s": round(settled_s, 1),
            "idle_window_s": idle_s,
            "idle_transactions_per_s": round(idle_tps, 2),
            "idle_gateway_cpu_percent": idle_cpu,
            # The longest /healthz answer while the streams opened, idled, took the events.
            "max_stall_ms": {
                phase: worst * 1000
                for phase, worst in zip(("opening", "idle", "fan-out"), stalls, strict=True)
            },
            "fanout_p50_ms": percentile(delays, 0.5),
            "fanout_p99_ms": percentile(delays, 0.99),
        }
    finally:
        await conn.close()


# ---- report -------------------------------------------------------------------------------

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"]  # fmt: skip


def draw_svg(sizes: list[int], p50: dict[str, list[float]], path: Path, title: str) -> None:
    """p50 (ms, log scale) against the size (log scale), one line per route."""
    import math

    width, height, left, right, top, bottom = 900, 480, 70, 250, 40, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for row in p50.values() for v in row if v > 0]
    low, high = math.log10(min(values)) - 0.1, math.log10(max(values)) + 0.1
    x_low, x_high = math.log10(sizes[0]), math.log10(sizes[-1])

    def x(size: int) -> float:
        return left + (math.log10(size) - x_low) / max(x_high - x_low, 1e-9) * plot_w

    def y(ms: float) -> float:
        return top + plot_h - (math.log10(ms) - low) / (high - low) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="14">{title}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>',
    ]
    for size in sizes:
        label = f"{size // 1000}k" if size < 1_000_000 else f"{size // 1_000_000}M"
        out.append(f'<text x="{x(size):.1f}" y="{top + plot_h + 18}" '
                   f'text-anchor="middle">{label} tasks</text>')  # fmt: skip
    exp = math.floor(low)
    while exp <= high:
        for mult in (1, 2, 5):
            ms = mult * 10**exp
            if low <= math.log10(ms) <= high:
                out.append(f'<line x1="{left}" y1="{y(ms):.1f}" x2="{left + plot_w}" '
                           f'y2="{y(ms):.1f}" stroke="#eee"/>')  # fmt: skip
                out.append(f'<text x="{left - 6}" y="{y(ms) + 4:.1f}" text-anchor="end">'
                           f"{ms:g} ms</text>")  # fmt: skip
        exp += 1
    for i, (route, row) in enumerate(p50.items()):
        color = COLORS[i % len(COLORS)]
        points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in zip(sizes, row, strict=True))
        out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>')
        for s, v in zip(sizes, row, strict=True):
            out.append(f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="3" fill="{color}"/>')
        ly = top + 10 + i * 18
        out.append(f'<line x1="{width - right + 15}" y1="{ly}" x2="{width - right + 35}" '
                   f'y2="{ly}" stroke="{color}" stroke-width="2"/>')  # fmt: skip
        out.append(f'<text x="{width - right + 40}" y="{ly + 4}">{route}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def machine() -> str:
    cpu = "unknown cpu"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores of {cpu}, {platform.python_version()}"


# ---- orchestration ------------------------------------------------------------------------


async def run(server_url: str, args: argparse.Namespace) -> None:
    admin = await asyncpg.connect(server_url)
    await admin.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
    await admin.execute(f"CREATE DATABASE {DB_NAME}")
    await admin.close()
    # The same server, another database (the embedded server's URL names its socket after).
    url = urlunsplit(urlsplit(server_url)._replace(path="/" + DB_NAME))
    try:
        await migrate_url(url)
        await measure_all(url, args)
    finally:
        admin = await asyncpg.connect(server_url)
        await admin.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        await admin.close()


async def measure_all(url: str, args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("A2AC_")},
        "A2AC_DATABASE_URL": url,
        "A2AC_JWT_SECRET": SECRET,
        "A2AC_ENCRYPTION_KEY": new_key(),
        "A2AC_MAX_STREAMS": str(args.streams + 100),
        "A2AC_LOG_LEVEL": "warning",
    }
    token = mint_token(SECRET, ALICE, ["*"], ttl_s=86400)
    headers = {"Authorization": f"Bearer {token}"}
    base = f"http://127.0.0.1:{port}"
    conn = await asyncpg.connect(url)
    table: dict[str, list[tuple[float, float]]] = {}
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"a2ac-scale-bench-{port}.log"
    with ExitStack() as stack:
        gw = stack.enter_context(process(
            [sys.executable, "-m", "a2a_continue", "serve", "--port", str(port)], env, log
        ))  # fmt: skip
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(base + "/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
            agents = await seed_base(conn)
            have = 0
            for size in [] if args.streams_only else sizes:
                started = time.perf_counter()
                await seed_to(conn, agents, have, size)
                have = size
                print(f"seeded {size} tasks in {time.perf_counter() - started:.0f} s", flush=True)
                for route, path in (await route_paths(conn, agents[0], size)).items():
                    times = await time_route(http, base, path, headers, args.requests)
                    row = (percentile(times, 0.5), percentile(times, 0.99))
                    table.setdefault(route, []).append(row)
                    print(f"  {route:28} p50 {row[0]:7.2f} ms  p99 {row[1]:7.2f} ms", flush=True)
        await conn.close()
        if table:
            report_sizes(sizes, table)
        if args.streams:
            figures = await measure_streams(url, base, gw.pid, headers, args.streams,
                                            args.fanout, args.tasks, args.idle_s,
                                            args.settle_s)  # fmt: skip
            print(json.dumps(figures, indent=2))


def report_sizes(sizes: list[int], table: dict[str, list[tuple[float, float]]]) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n{stamp}, {machine()}")
    head = " | ".join(f"{s:,} p50 / p99 ms" for s in sizes)
    print(f"| route | {head} | p50 ratio to {sizes[0]:,} |")
    print("|---|" + "---|" * len(sizes) + "---|")
    for route, rows in table.items():
        cells = " | ".join(f"{p50:.2f} / {p99:.2f}" for p50, p99 in rows)
        ratios = " ".join(f"{rows[i][0] / rows[0][0]:.1f}x" for i in range(1, len(rows)))
        print(f"| {route} | {cells} | {ratios} |")
    p50 = {route: [r[0] for r in rows] for route, rows in table.items()}
    draw_svg(sizes, p50, ROOT / "docs" / "scale.svg",
             f"Read routes: p50 against the store's size ({stamp})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--requests", type=int, default=200, help="timed GETs per route")
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--fanout", type=int, default=1000)
    parser.add_argument(
        "--tasks",
        type=int,
        default=1000,
        help="tasks the streams wait on: the hot one and the others'",
    )
    parser.add_argument("--idle-s", type=float, default=60.0, help="the idle window")
    parser.add_argument(
        "--settle-s",
        type=float,
        default=None,
        help="open the idle window this long after the streams opened"
        " (default: once the gateway is quiet, and 12 s more)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, 1,000 streams")
    parser.add_argument("--streams-only", action="store_true", help="skip the data sizes")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.requests, args.streams, args.fanout = "1000,10000", 50, 1000, 200
        args.tasks = 100
        args.idle_s = 10.0
    with database() as (server_url, _):
        asyncio.run(run(server_url, args))


if __name__ == "__main__":
    main()
