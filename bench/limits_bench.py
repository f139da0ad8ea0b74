"""Benchmark of fair shares (SPEC §20): a caller flooding at 10x its limit beside a caller
under its limit.

Three processes: the gateway (the real ``a2a-continue serve``, every caller limited to
``--limit`` requests/s with a burst of ``--burst``, so leases of 20 tokens), this script as
the calm caller, and the flooding caller (this script again, so that its load does not share
the calm one's loop). The
calm caller reads (``GET /v1/a2a/agents``) at half its limit, paced, over one connection;
in a flood phase another caller sends 10x the limit over 32 connections at once, from 1.5 s
before the calm caller's measured requests to their end (so what is measured is a sustained
flood, past the burst its bucket saved up while it was quiet). Phases
alone and flooded are interleaved (``--reps`` pairs); the line gives the calm caller's p99
alone and flooded (the median over the pairs), the median of the paired ratios (target
<= x1.5), the calm caller's 429s (target 0), and what reached PostgreSQL per admitted
request: the lease statements (inserts and updates of ``a2a_limit_buckets``) and every
transaction.
Usage:
    python bench/limits_bench.py [--limit 20] [--seconds 8] [--reps 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from continue_bench import database, free_port, percentile, process, wait_listening

ROOT = Path(__file__).resolve().parent.parent
FLOOD_CONNECTIONS = 32
# The flood starts this long before the calm caller's measured requests: what is measured is a
# sustained flood, past the burst its bucket saved up while it was quiet.
LEAD_S = 1.5
flood_rate: list[float] = []  # what the flooding caller sent, per flood phase (requests/s)
READ = "/v1/a2a/agents"


async def paced(
    http: aiohttp.ClientSession, url: str, auth: dict[str, str], rate: float, until: float
) -> tuple[list[float], dict[int, int]]:
    """Send at ``rate`` requests/s until ``until``: each latency (s) and the statuses."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    interval = 1.0 / rate
    due = time.perf_counter()
    while due < until:
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        began = time.perf_counter()
        async with http.get(url, headers=auth) as r:
            await r.read()
            statuses[r.status] = statuses.get(r.status, 0) + 1
        latencies.append(time.perf_counter() - began)
        due += interval
    return latencies, statuses


async def one_connection(
    host: str, port: int, head: bytes, each: float, until: float, statuses: dict[int, int]
) -> None:
    """One flooding connection: plain HTTP/1.1 keep-alive, paced to ``each`` requests/s (a
    load generator as cheap as it gets, so that it takes little of the machine)."""
    reader, writer = await asyncio.open_connection(host, port)
    due = time.perf_counter()
    try:
        while due < until:
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(head)
            status_line = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            status = int(status_line.split()[1])
            statuses[status] = statuses.get(status, 0) + 1
            due += 1.0 / each
    finally:
        writer.close()


async def flood(base: str, token: str, rate: float, seconds: float) -> None:
    """The flooding caller (a process of its own): for each line "go" on stdin, flood for
    ``seconds``, then print how many requests were admitted and how many were sent."""
    os.nice(5)  # the load generator yields the cores to the gateway and the calm caller
    host, port = base.removeprefix("http://").split(":")
    head = (
        f"GET {READ} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n\r\n"
    ).encode()
    loop = asyncio.get_running_loop()
    while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "go":
        until = time.perf_counter() + seconds
        statuses: dict[int, int] = {}
        each = rate / FLOOD_CONNECTIONS
        await asyncio.gather(
            *(
                one_connection(host, int(port), head, each, until, statuses)
                for _ in range(FLOOD_CONNECTIONS)
            )
        )
        print(statuses.get(200, 0), sum(statuses.values()), flush=True)


async def db_counts(db_url: str) -> tuple[int, int]:
    """(lease statements so far, transactions so far) of the gateway's database."""
    conn = await asyncpg.connect(db_url)
    try:
        leases = await conn.fetchval(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0) FROM pg_stat_user_tables"
            " WHERE relname = 'a2a_limit_buckets'"
        )
        xacts = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(leases), int(xacts)
    finally:
        await conn.close()


async def phase(
    args: argparse.Namespace, base: str, calm: str, flooder: asyncio.subprocess.Process | None
) -> tuple[float, float, int, int]:
    """One phase: the calm caller's p99 and p50 in ms, its 429s, requests admitted in all."""
    if flooder is not None:
        assert flooder.stdin is not None
        flooder.stdin.write(b"go\n")
        await flooder.stdin.drain()
        await asyncio.sleep(LEAD_S)
    until = time.perf_counter() + args.seconds
    auth = {"Authorization": f"Bearer {calm}"}
    async with aiohttp.ClientSession() as http:
        latencies, statuses = await paced(http, base + READ, auth, args.limit / 2, until)
    admitted = statuses.get(200, 0)
    if flooder is not None:
        assert flooder.stdout is not None
        passed, sent = (await flooder.stdout.readline()).split()
        admitted += int(passed)
        flood_rate.append(int(sent) / (args.seconds + LEAD_S))
    ordered = sorted(latencies)
    return percentile(ordered, 0.99), percentile(ordered, 0.5), statuses.get(429, 0), admitted


async def flooding(args: argparse.Namespace, base: str, token: str) -> Any:
    """Start the flooding caller's process (it floods on each "go")."""
    return await asyncio.create_subprocess_exec(
        *(sys.executable, __file__, "--role", "flood", "--base", base, "--token", token),
        *("--rate", str(args.limit * 10), "--seconds", str(args.seconds + LEAD_S)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )


async def measure(args: argparse.Namespace, base: str, db_url: str, tokens: list[str]) -> str:
    calm, flood_token = tokens
    flooder = await flooding(args, base, flood_token)
    await phase(args, base, calm, flooder)  # warm up: connections, statements, leases
    alone: list[float] = []
    flooded: list[float] = []
    calm_429 = admitted = 0
    await asyncio.sleep(1.5)  # the server's table statistics are flushed about every second
    leases0, xacts0 = await db_counts(db_url)
    medians: list[float] = []
    for _ in range(args.reps):
        p99, p50, refused, passed = await phase(args, base, calm, None)
        alone.append(p99)
        p99_flood, p50_flood, refused_flood, passed_flood = await phase(args, base, calm, flooder)
        flooded.append(p99_flood)
        medians.append(p50_flood / p50)
        calm_429 += refused + refused_flood
        admitted += passed + passed_flood
    assert flooder.stdin is not None
    flooder.stdin.close()
    await flooder.wait()
    await asyncio.sleep(1.5)
    leases1, xacts1 = await db_counts(db_url)
    ratios = [f / a for a, f in zip(alone, flooded, strict=True)]
    return (
        f"limits: calm caller p99 {statistics.median(alone):.1f} ms alone,"
        f" {statistics.median(flooded):.1f} ms beside a caller flooding at 10x its"
        f" {args.limit:g}/s limit (burst {args.burst}; sent"
        f" {statistics.median(flood_rate):.0f}/s) over {FLOOD_CONNECTIONS} connections"
        " (median of"
        f" {args.reps} paired ratios x{statistics.median(ratios):.2f}, target <= x1.5;"
        f" pairs {', '.join(f'x{r:.2f}' for r in ratios)}; p50 x{statistics.median(medians):.2f});"
        f" calm caller 429s: {calm_429}"
        f" (target 0); per admitted request: {(leases1 - leases0) / admitted:.3f} lease"
        f" statements, {(xacts1 - xacts0) / admitted:.2f} database transactions in all"
        f" ({admitted} admitted)"
    )


def main() -> None:
    """Start the gateway with its limits; measure; print the line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=float, default=20.0, help="requests/s per caller")
    parser.add_argument("--burst", type=int, default=200, help="each caller's burst")
    parser.add_argument("--seconds", type=float, default=15.0, help="per phase")
    parser.add_argument("--reps", type=int, default=9, help="pairs of phases")
    parser.add_argument("--quick", action="store_true", help="3 s phases, 2 pairs")
    parser.add_argument("--role", choices=["flood"], help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "flood":
        return asyncio.run(flood(args.base, args.token, args.rate, args.seconds))
    if args.quick:
        args.seconds, args.reps = 3.0, 2

    from a2a_continue.core.access.callers import mint_token
    from a2a_continue.core.schema import migrate_url
    from a2a_continue.runtime.secrets import new_key

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    secret = new_key() + new_key()
    with ExitStack() as stack:
        url, _ = stack.enter_context(database())
        asyncio.run(migrate_url(url))
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="a2ac-limits-")))
        limit = f"{args.limit:g}"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "A2AC_DATABASE_URL": url,
            "A2AC_JWT_SECRET": secret,
            "A2AC_ENCRYPTION_KEY": new_key(),
            "A2AC_HOST": "127.0.0.1",
            "A2AC_PORT": str(port),
            "A2AC_LIMIT_CALLER_RPS": limit,
            "A2AC_LIMIT_CALLER_BURST": str(args.burst),
            "A2AC_LOG_LEVEL": "warning",
        }
        gateway = stack.enter_context(
            process([sys.executable, "-m", "a2a_continue", "serve"], env, logs / "gateway")
        )
        tokens = [
            mint_token(secret, sub, ["a2a.read"])
            for sub in ("calm@example.com", "flood@example.com")
        ]
        import uvloop

        async def run() -> str:
            async with aiohttp.ClientSession() as http:
                await wait_listening(base + "/healthz", http, gateway)
            return await measure(args, base, url, tokens)

        line: Any = uvloop.run(run())
        print(line)


if __name__ == "__main__":
    main()
