"""Benchmark: what a follow-up through the gateway costs next to a direct call and a bare proxy.

Four processes, as in production: a 1.0 agent that answers at once, the gateway (the real
``a2a-continue serve``), a bare pass-through proxy on the same server stack (uvicorn, uvloop,
httptools, an aiohttp client; no auth, no database), and this script as the load generator.
Each path is measured at concurrency 1 and 16 after a warm-up:
- direct: the client posts the A2A request to the agent itself;
- proxy: the same request through the bare pass-through;
- follow-up and start: the gateway's routes.
The CPU per request of the gateway (its workers included) and of the proxy comes from
/proc/<pid>/stat, PostgreSQL's from its processes' (every ``postgres`` process on the machine)
and the whole machine's from /proc/stat: the last bounds the throughput the cores allow.
``A2AC_BENCH_SQL`` runs statements on the database before the gateway starts (experiments:
a setting, an index). Ratios within one run hold on a noisy machine where absolute
milliseconds do not.

With ``--base COMMIT`` (``make bench BASE=COMMIT``) the script builds that commit in a temporary
directory (``git archive``, its own venv; kept for the next run of the same commit), starts its
gateway on an embedded PostgreSQL of its own beside the current tree's gateway on another, and
runs the two follow-ups interleaved (A B, then B A, ...) for ``--reps`` repetitions at each
concurrency, printing both and the ratios current / base. Usage:
    python bench/continue_bench.py [--requests 2000] [--warmup 200] [--workers 1] [--quick]
                                   [--base COMMIT [--reps 3]]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = (1, 16)
TICKS = os.sysconf("SC_CLK_TCK")

Call = Callable[[int], Awaitable[None]]


# ---- the agent and the proxy, each run as its own process --------------------------------


def run_agent(port: int) -> None:
    """Serve a 1.0 agent that keeps every task in input-required and answers at once."""
    import uvloop
    from aiohttp import web

    async def rpc(request: web.Request) -> web.Response:
        body = msgspec.json.decode(await request.read())
        message = body["params"]["message"]
        task = {
            "id": message.get("taskId") or uuid.uuid4().hex,
            "contextId": message.get("contextId") or uuid.uuid4().hex,
            "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
        }
        answer = {"jsonrpc": "2.0", "id": body["id"], "result": {"task": task}}
        return web.Response(body=msgspec.json.encode(answer), content_type="application/json")

    app = web.Application()
    app.router.add_post("/", rpc)
    uvloop.run(_serve_aiohttp(app, port))


async def _serve_aiohttp(app: Any, port: int) -> None:
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


def run_proxy(port: int, agent_url: str) -> None:
    """Serve a bare pass-through on the gateway's server stack: body in, agent's answer out."""
    import uvicorn

    session: aiohttp.ClientSession | None = None
    headers = {"Content-Type": "application/json"}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal session
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if session is None:
            session = aiohttp.ClientSession()
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        async with session.post(agent_url, data=b"".join(chunks), headers=headers) as r:
            raw = await r.read()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": raw})

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
    )


# ---- the load generator -------------------------------------------------------------------


def free_port() -> int:
    """A local port free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its live children, in seconds."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def database_cpu_seconds() -> float:
    """User + system CPU of every PostgreSQL process on the machine, in seconds."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            head, tail = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        if head.endswith("(postgres"):
            fields = tail.split()
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy (not idle, not waiting on disk)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICKS


def send_request(task_id: str) -> bytes:
    """The 1.0 follow-up a client would send the agent itself."""
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "taskId": task_id,
        "parts": [{"text": "x"}],
    }
    return msgspec.json.encode(
        {
            "jsonrpc": "2.0",
            "id": uuid.uuid4().hex,
            "method": "SendMessage",
            "params": {"message": message},
        }
    )


async def timed(n: int, concurrency: int, call: Call) -> list[float]:
    """Run ``call`` n times, ``concurrency`` at once; return each latency in seconds."""
    latencies: list[float] = []
    queue = iter(range(n))

    async def worker(number: int) -> None:
        for _ in queue:
            start = time.perf_counter()
            await call(number)
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return latencies


def percentile(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values, in milliseconds."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


async def wait_listening(
    url: str, session: aiohttp.ClientSession, proc: subprocess.Popen[Any]
) -> None:
    """Wait until ``url`` answers (any status) or its process dies."""
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode}")
        try:
            async with session.get(url) as r:
                await r.read()
                return
        except aiohttp.ClientError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not start")


async def measure(
    urls: dict[str, str], gateway_pid: int, token: str, n: int, warmup: int, procs: list[Any],
    postmaster: int | None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Run every path at each concurrency; return one row per measurement."""
    proxy_pid = procs[2].pid
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    plain = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as http:
        await wait_listening(urls["gateway"] + "/healthz", http, procs[1])
        await wait_listening(urls["proxy"] + "/", http, procs[2])
        reg = {"name": "bench", "endpointUrl": urls["agent"] + "/", "protocolVersion": "1.0"}
        async with http.post(urls["gateway"] + "/v1/a2a/agents", json=reg, headers=auth) as r:
            assert r.status == 201, await r.text()
            agent_id = (await r.json())["id"]
        start_url = f"{urls['gateway']}/v1/a2a/{agent_id}/messages"
        tasks: list[str] = []
        for _ in range(max(CONCURRENCY)):
            async with http.post(start_url, data=b'{"text":"hi"}', headers=auth) as r:
                tasks.append((await r.json())["result"]["task"]["id"])
        follow = [f"{urls['gateway']}/v1/a2a/{agent_id}/tasks/{t}/messages" for t in tasks]
        direct = [send_request(t) for t in tasks]

        def post(url: str, body: bytes, headers: dict[str, str]) -> Awaitable[None]:
            async def go() -> None:
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"{url}: {r.status} {await r.text()}")

            return go()

        paths: dict[str, Call] = {
            "direct": lambda w: post(urls["agent"] + "/", direct[w], plain),
            "proxy": lambda w: post(urls["proxy"] + "/", direct[w], plain),
            "follow-up": lambda w: post(follow[w], b'{"text":"x"}', auth),
            "start": lambda w: post(start_url, b'{"text":"hi"}', auth),
        }
        rows = []
        only = os.environ.get("A2AC_BENCH_ONLY")  # e.g. "follow-up:16" while profiling
        for c in CONCURRENCY:
            for name, call in paths.items():
                if only and only != f"{name}:{c}":
                    continue
                await timed(warmup, c, call)
                pid = proxy_pid if name == "proxy" else gateway_pid
                cpu, db, busy = cpu_seconds(pid), postgres_cpu(postmaster), machine_busy_seconds()
                began = time.perf_counter()
                latencies = sorted(await timed(n, c, call))
                wall = time.perf_counter() - began
                cpu = cpu_seconds(pid) - cpu
                db = postgres_cpu(postmaster) - db
                busy = machine_busy_seconds() - busy
                rows.append(
                    {
                        "path": name,
                        "c": c,
                        "rps": n / wall,
                        "p50": percentile(latencies, 0.50),
                        "p99": percentile(latencies, 0.99),
                        "cpu": cpu * 1000 / n if name != "direct" else None,
                        "db": db * 1000 / n,
                        "machine": busy * 1000 / n,
                    }
                )
                print(_line(rows[-1]), flush=True)
        return rows


def _line(row: dict[str, Any]) -> str:
    cpu = f"{row['cpu']:6.3f}" if row["cpu"] is not None else "     -"
    return (
        f"| {row['path']:9s} | {row['c']:2d} | {row['rps']:7.0f} | {row['p50']:6.3f} "
        f"| {row['p99']:6.3f} | {cpu} | {row['db']:6.3f} | {row['machine']:6.3f} |"
    )


def report(rows: list[dict[str, Any]]) -> None:
    """Print the ratios the targets are stated in."""
    by = {(r["path"], r["c"]): r for r in rows}
    gap = by["follow-up", 1]["p50"] - by["direct", 1]["p50"]
    share = by["follow-up", 16]["rps"] / by["proxy", 16]["rps"]
    cpu = by["follow-up", 16]["cpu"]
    proxy_gap = by["proxy", 1]["p50"] - by["direct", 1]["p50"]
    print()
    print(f"follow-up p50 - direct p50, c=1:     {gap:+.3f} ms (target <= +0.8)")
    print(f"proxy p50 - direct p50, c=1:         {proxy_gap:+.3f} ms")
    print(f"follow-up / proxy throughput, c=16:  x{share:.2f} (target >= x0.45)")
    print(f"gateway CPU per follow-up, c=16:     {cpu:.3f} ms (target <= 0.3)")
    print(f"gateway CPU per follow-up, c=1:      {by['follow-up', 1]['cpu']:.3f} ms")
    print(f"gateway CPU per start, c=16:         {by['start', 16]['cpu']:.3f} ms")
    print(f"proxy CPU per request, c=16:         {by['proxy', 16]['cpu']:.3f} ms")
    follow = by["follow-up", 16]
    cores = os.cpu_count() or 1
    print(f"PostgreSQL CPU per follow-up, c=16:  {follow['db']:.3f} ms")
    print(
        f"machine CPU per follow-up, c=16:     {follow['machine']:.3f} ms "
        f"(all processes; {cores} cores allow at most {cores * 1000 / follow['machine']:.0f}/s)"
    )


# ---- orchestration ------------------------------------------------------------------------


@contextmanager
def database(*, embedded: bool = False) -> Iterator[tuple[str, int | None]]:
    """A2AC_DATABASE_URL (unless ``embedded``), or an embedded server in a temporary directory;
    yield its URL and the pid of its postmaster (None for a server not started here)."""
    given = os.environ.get("A2AC_DATABASE_URL")
    if given and not embedded:
        yield given, None
        return
    from a2a_continue.ops.embedded import embedded_database

    with (
        tempfile.TemporaryDirectory(prefix="a2ac-bench-") as tmp,
        embedded_database(Path(tmp)) as url,
    ):
        pid_file = Path(tmp) / "pgdata" / "postmaster.pid"
        yield url, int(pid_file.read_text().split()[0]) if pid_file.exists() else None


def postgres_cpu(postmaster: int | None) -> float:
    """CPU seconds of one PostgreSQL server (its postmaster and every child), or of every
    PostgreSQL process on the machine when the server was not started here."""
    return database_cpu_seconds() if postmaster is None else cpu_seconds(postmaster)


@contextmanager
def process(
    args: list[str], env: dict[str, str], log: Path, cwd: Path | None = None
) -> Iterator[subprocess.Popen[Any]]:
    """Run a child for the block, its output to ``log``; SIGTERM it after."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _run_sql(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        for statement in sql.split(";"):
            await conn.execute(statement)
    finally:
        await conn.close()


def gateway_env(
    root: Path, url: str, secret: str, key: str, port: int, workers: int
) -> dict[str, str]:
    """The environment a gateway of the tree at ``root`` is served with."""
    return {
        **os.environ,
        "PYTHONPATH": str(root),
        "A2AC_DATABASE_URL": url,
        "A2AC_JWT_SECRET": secret,
        "A2AC_ENCRYPTION_KEY": key,
        "A2AC_WORKERS": str(workers),
        "A2AC_HOST": "127.0.0.1",
        "A2AC_PORT": str(port),
    }


def main() -> None:
    """Start the agent, the gateway and the proxy; measure; print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1, help="gateway processes")
    parser.add_argument("--quick", action="store_true", help="200 requests, 50 to warm up")
    parser.add_argument("--base", help="a commit to measure against, interleaved (A/B mode)")
    parser.add_argument("--reps", type=int, default=3, help="A/B repetitions per concurrency")
    parser.add_argument("--role", choices=["agent", "proxy"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--agent-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "agent":
        return run_agent(args.port)
    if args.role == "proxy":
        return run_proxy(args.port, args.agent_url)
    if args.quick:
        args.requests, args.warmup = 200, 50
    sys.path.insert(0, str(ROOT))
    if args.base:
        return run_ab(args)

    from a2a_continue.core.access.callers import mint_token
    from a2a_continue.core.schema import migrate_url
    from a2a_continue.runtime.secrets import new_key

    ports = {name: free_port() for name in ("agent", "gateway", "proxy")}
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    secret = new_key() + new_key()
    me = [sys.executable, __file__]
    with ExitStack() as stack:
        url, postmaster = stack.enter_context(database())
        asyncio.run(migrate_url(url))
        if os.environ.get("A2AC_BENCH_SQL"):  # experiments: e.g. a setting or an index
            asyncio.run(_run_sql(url, os.environ["A2AC_BENCH_SQL"]))
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="a2ac-bench-logs-")))
        env = gateway_env(ROOT, url, secret, new_key(), ports["gateway"], args.workers)
        agent = stack.enter_context(
            process([*me, "--role", "agent", "--port", str(ports["agent"])], env, logs / "agent")
        )
        gateway = stack.enter_context(
            process([sys.executable, "-m", "a2a_continue", "serve"], env, logs / "gateway")
        )
        proxy_args = [
            "--role",
            "proxy",
            "--port",
            str(ports["proxy"]),
            "--agent-url",
            urls["agent"] + "/",
        ]
        proxy = stack.enter_context(process([*me, *proxy_args], env, logs / "proxy"))
        token = mint_token(secret, "bench@example.com", ["*"])
        print(f"gateway pid {gateway.pid}", file=sys.stderr, flush=True)
        print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} cores, "
              f"{args.requests} requests per point, gateway workers: {args.workers}")  # fmt: skip
        print(
            "| path      |  c |   req/s | p50 ms | p99 ms | CPU ms/req | PostgreSQL CPU ms/req "
            "| machine CPU ms/req |"
        )
        print("|---|---|---|---|---|---|---|---|")
        import uvloop

        procs = [agent, gateway, proxy]
        rows = uvloop.run(
            measure(urls, gateway.pid, token, args.requests, args.warmup, procs, postmaster)
        )
        if not os.environ.get("A2AC_BENCH_ONLY"):
            report(rows)


# ---- A/B: the current tree's follow-up against a base commit's, in one interleaved run ------


def build_base(commit: str) -> Path:
    """The tree of ``commit`` with a venv of its own, in a temporary directory (built once per
    commit: a later run of the same commit reuses it)."""
    full = subprocess.run(
        ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    where = Path(tempfile.gettempdir()) / f"a2ac-bench-base-{full[:12]}"
    if (where / ".built").exists():
        return where
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    print(f"building {full[:12]} in {where} ...", file=sys.stderr, flush=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", full], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "venv", str(where / ".venv")], check=True)
    pip = [str(where / ".venv" / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    built = subprocess.run([*pip, "-e", f"{where}[embedded]"], cwd=where, capture_output=True)
    if built.returncode != 0:
        sys.stderr.buffer.write(built.stdout + built.stderr)
        raise SystemExit(f"could not build {commit} in {where}")
    (where / ".built").write_text(full + "\n")
    return where


@dataclass
class Side:
    """One gateway of the A/B run: its tree, its own database, its follow-up URLs."""

    label: str
    url: str
    gateway: subprocess.Popen[Any]
    postmaster: int | None
    follow: list[str] = field(default_factory=list)


async def prepare(http: aiohttp.ClientSession, side: Side, agent_url: str, auth: Any) -> None:
    """Register the agent on the side's gateway and start one task per concurrent caller."""
    await wait_listening(side.url + "/healthz", http, side.gateway)
    reg = {"name": "bench", "endpointUrl": agent_url, "protocolVersion": "1.0"}
    async with http.post(side.url + "/v1/a2a/agents", json=reg, headers=auth) as r:
        assert r.status == 201, await r.text()
        agent_id = (await r.json())["id"]
    for _ in range(max(CONCURRENCY)):
        start = f"{side.url}/v1/a2a/{agent_id}/messages"
        async with http.post(start, data=b'{"text":"hi"}', headers=auth) as r:
            assert r.status == 200, await r.text()
            task = (await r.json())["result"]["task"]["id"]
        side.follow.append(f"{side.url}/v1/a2a/{agent_id}/tasks/{task}/messages")


async def measure_ab(
    sides: list[Side], agent_url: str, token: str, n: int, warmup: int, reps: int
) -> list[dict[str, Any]]:
    """Run each side's follow-up at each concurrency, A then B, then B then A, ``reps`` times."""
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    rows: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as http:
        for side in sides:
            await prepare(http, side, agent_url, auth)

        def caller(side: Side) -> Call:
            async def call(worker: int) -> None:
                async with http.post(side.follow[worker], data=b'{"text":"x"}', headers=auth) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"{side.label}: {r.status} {await r.text()}")

            return call

        for rep in range(reps):
            for c in CONCURRENCY:
                for side in sides if rep % 2 == 0 else sides[::-1]:
                    call = caller(side)
                    await timed(warmup, c, call)
                    cpu, db = cpu_seconds(side.gateway.pid), postgres_cpu(side.postmaster)
                    began = time.perf_counter()
                    latencies = sorted(await timed(n, c, call))
                    wall = time.perf_counter() - began
                    row = {
                        "side": side.label, "rep": rep, "c": c, "rps": n / wall,
                        "p50": percentile(latencies, 0.50), "p99": percentile(latencies, 0.99),
                        "cpu": (cpu_seconds(side.gateway.pid) - cpu) * 1000 / n,
                        "db": (postgres_cpu(side.postmaster) - db) * 1000 / n,
                    }  # fmt: skip
                    rows.append(row)
                    print(
                        f"| {rep + 1} | {side.label:7s} | {c:2d} | {row['rps']:6.0f} "
                        f"| {row['p50']:6.3f} | {row['p99']:6.3f} | {row['cpu']:6.3f} "
                        f"| {row['db']:6.3f} |",
                        flush=True,
                    )
    return rows


AB_FIGURES = (
    ("rps", "req/s"),
    ("p50", "p50 ms"),
    ("p99", "p99 ms"),
    ("cpu", "gateway CPU ms/follow-up"),
    ("db", "PostgreSQL CPU ms/follow-up"),
)


def report_ab(rows: list[dict[str, Any]], base: str) -> None:
    """Print each side's medians and the ratios current / base, paired within each repetition."""
    print()
    print(f"medians of the repetitions; ratio = current / base ({base}), the median of the")
    print("per-repetition ratios with their min and max")
    print("| figure | c | current | base | ratio | min | max |")
    print("|---|---|---|---|---|---|---|")
    for c in CONCURRENCY:
        for key, name in AB_FIGURES:
            mine = {r["rep"]: r[key] for r in rows if r["c"] == c and r["side"] == "current"}
            theirs = {r["rep"]: r[key] for r in rows if r["c"] == c and r["side"] == "base"}
            ratios = [mine[rep] / theirs[rep] for rep in mine if theirs.get(rep)]
            print(
                f"| {name} | {c} | {median(mine.values()):.3f} | {median(theirs.values()):.3f} "
                f"| x{median(ratios):.3f} | x{min(ratios):.3f} | x{max(ratios):.3f} |"
            )


def run_ab(args: argparse.Namespace) -> None:
    """Measure the current tree's follow-up against the base commit's, each on its own
    embedded PostgreSQL, with one agent for both."""
    from a2a_continue.core.access.callers import mint_token
    from a2a_continue.runtime.secrets import new_key

    base_root = build_base(args.base)
    secret = new_key() + new_key()
    agent_port = free_port()
    agent_url = f"http://127.0.0.1:{agent_port}/"
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="a2ac-bench-logs-")))
        agent_args = [sys.executable, __file__, "--role", "agent", "--port", str(agent_port)]
        stack.enter_context(process(agent_args, {**os.environ}, logs / "agent"))
        trees = (("current", ROOT, sys.executable), ("base", base_root, None))
        sides = []
        for label, root, python in trees:
            url, postmaster = stack.enter_context(database(embedded=True))
            port = free_port()
            env = gateway_env(root, url, secret, new_key(), port, args.workers)
            exe = python or str(root / ".venv" / "bin" / "python")
            serve = [exe, "-m", "a2a_continue", "serve"]
            gateway = stack.enter_context(process(serve, env, logs / label, cwd=root))
            sides.append(Side(label, f"http://127.0.0.1:{port}", gateway, postmaster))
        token = mint_token(secret, "bench@example.com", ["*"])
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
        print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} cores, load {load}, "
              f"{args.requests} requests per point, {args.reps} repetitions, "
              f"base {args.base} ({base_root})")  # fmt: skip
        print("| rep | side | c | req/s | p50 ms | p99 ms | gateway CPU ms | PostgreSQL CPU ms |")
        print("|---|---|---|---|---|---|---|---|")
        import uvloop

        try:
            rows = uvloop.run(
                measure_ab(sides, agent_url, token, args.requests, args.warmup, args.reps)
            )
        except Exception:
            for label in ("current", "base"):
                print(f"---- {label} gateway log", file=sys.stderr)
                print((logs / label).read_text()[-3000:], file=sys.stderr)
            raise
        report_ab(rows, args.base)
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
        print(f"load after the run: {load}")


if __name__ == "__main__":
    main()
