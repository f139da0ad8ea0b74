"""The proofs of `make compose-ha-smoke`, against docker-compose.ha.yml brought up by
scripts/compose_ha_smoke.sh, every request through HAProxy unless said otherwise:

1. the README walkthrough (scripts/walkthrough.py on the running stack);
2. live event streams resumed with Last-Event-ID on the other replica: no gap, no duplicate;
3. a rolling restart of every replica (SIGTERM, drain, start) under steady load: clients
   doing start + follow-up with Idempotency-Key, retrying 503, 502, 504, an in-flight key
   and connection errors: 0 lost, 0 duplicated follow-ups, 0 x 500;
4. a PgBouncer restart under the same load: 0 x 500, no follow-up recorded twice (one whose
   answer arrives while the pooler restarts is answered and may go unrecorded, and a claim
   whose commit's answer is lost is logged as expired before the retry takes it: counted);
5. a replica SIGKILLed while it watches tasks: the other one takes them over (and, with
   HA_SMOKE_PUSH=1, their push deliveries).

It prints the figures: requests, retries, p50/p99, events checked. Environment (set by the
shell script): HA_COMPOSE (the compose command of the stack), HA_GATEWAY_PORT (HAProxy),
HA_GW1_PORT, HA_GW2_PORT, HA_AGENT_PORT, HA_SLOW_AGENT_PORT, HA_JWT_SECRET, HA_RUN.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from a2a_continue.core.access.callers import mint_token

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = shlex.split(os.environ["HA_COMPOSE"])
BASE = f"http://127.0.0.1:{os.environ['HA_GATEWAY_PORT']}"
REPLICAS = {
    "gateway-1": f"http://127.0.0.1:{os.environ['HA_GW1_PORT']}",
    "gateway-2": f"http://127.0.0.1:{os.environ['HA_GW2_PORT']}",
}
AGENT_URL = f"http://127.0.0.1:{os.environ['HA_AGENT_PORT']}/"
SLOW_AGENT_URL = f"http://127.0.0.1:{os.environ['HA_SLOW_AGENT_PORT']}/"
SECRET = os.environ["HA_JWT_SECRET"]
RUN = Path(os.environ["HA_RUN"])
PUSH = os.environ.get("HA_SMOKE_PUSH", "1") == "1"
TOKEN = mint_token(SECRET, "smoke@example.com", ["*"], [], True, 7200)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RETRIED = {502, 503, 504}
IN_FLIGHT = "urn:a2a-continue:problem:idempotency-key-in-flight"


class SmokeFailure(Exception):
    """A proof did not hold."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SmokeFailure(what)


def compose(*args: str, limit: float = 300) -> str:
    done = subprocess.run(
        [*COMPOSE, *args], capture_output=True, text=True, timeout=limit, check=False
    )
    if done.returncode != 0:
        raise SmokeFailure(f"compose {' '.join(args)}: {done.stderr.strip()[-800:]}")
    return done.stdout


@dataclass
class Figures:
    """What the clients saw."""

    requests: int = 0
    retries: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    connection_errors: int = 0
    durations: list[float] = field(default_factory=list)

    def line(self, what: str) -> str:
        ms = sorted(d * 1000 for d in self.durations) or [0.0]
        p50 = statistics.median(ms)
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
        seen = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        return (
            f"{what}: {self.requests} requests, {self.retries} retries"
            f" ({self.connection_errors} connection errors), statuses {{{seen}}},"
            f" p50 {p50:.0f} ms, p99 {p99:.0f} ms"
        )


async def call(
    session: aiohttp.ClientSession,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    base: str = BASE,
) -> tuple[int, Any, Any]:
    async with session.request(
        method,
        base + path,
        json=body,
        headers={**AUTH, **(headers or {})},
        timeout=aiohttp.ClientTimeout(total=60),
    ) as r:
        raw = await r.read()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = raw.decode(errors="replace")
        return r.status, data, r.headers.copy()


async def keyed(
    session: aiohttp.ClientSession, figures: Figures, path: str, body: Any, deadline_s: float = 120
) -> tuple[int, Any, Any]:
    """One keyed request, retried with its key until it has an answer that is not a retry."""
    key = str(uuid.uuid4())
    end = time.monotonic() + deadline_s
    first = True
    while True:
        if not first:
            figures.retries += 1
        first = False
        figures.requests += 1
        began = time.monotonic()
        try:
            status, data, headers = await call(
                session, "POST", path, body, {"Idempotency-Key": key}
            )
        except (TimeoutError, aiohttp.ClientError):
            figures.connection_errors += 1
            if time.monotonic() > end:
                raise SmokeFailure(f"POST {path}: no answer within {deadline_s} s") from None
            await asyncio.sleep(0.2)
            continue
        figures.statuses[status] = figures.statuses.get(status, 0) + 1
        if status == 500:
            raise SmokeFailure(f"POST {path}: 500 {data}")
        again = status in RETRIED or (
            status == 409 and isinstance(data, dict) and data.get("type") == IN_FLIGHT
        )
        if again and time.monotonic() < end:
            await asyncio.sleep(0.2)
            continue
        figures.durations.append(time.monotonic() - began)
        return status, data, headers


async def register(session: aiohttp.ClientSession, url: str, name: str) -> str:
    status, data, _ = await call(
        session,
        "POST",
        "/v1/a2a/agents",
        {"name": name, "endpointUrl": url, "protocolVersion": "1.0", "visibility": "public"},
    )
    check(status == 201, f"register {name}: {status} {data}")
    return str(data["id"])


# ---- 1. the README walkthrough ---------------------------------------------------------------


def walkthrough() -> None:
    data_dir = RUN / "walk"
    data_dir.mkdir(exist_ok=True)
    admin = mint_token(SECRET, "admin@localhost", ["*"], [], True, 86400)
    (data_dir / "admin-token").write_text(admin + "\n")
    env = {
        **os.environ,
        "WALK_GATEWAY_PORT": os.environ["HA_GATEWAY_PORT"],
        "WALK_AGENT_PORT": os.environ["HA_AGENT_PORT"],
        "WALK_DATA_DIR": str(data_dir),
        "WALK_JWT_SECRET": SECRET,
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "walkthrough.py")], env=env, timeout=600
    )
    check(done.returncode == 0, "the README walkthrough through HAProxy failed")


# ---- 2. streams resumed on the other replica ---------------------------------------------------


async def read_events(response: aiohttp.ClientResponse, count: int | None) -> list[int]:
    """The seqs of the events of an SSE response, up to ``count`` (None: to its end)."""
    seqs: list[int] = []
    event_id: str | None = None
    while count is None or len(seqs) < count:
        line = await asyncio.wait_for(response.content.readline(), 30)
        if not line:
            break
        text = line.decode().rstrip("\r\n")
        if text.startswith("id:"):
            event_id = text[3:].strip()
        elif text == "" and event_id is not None:
            seqs.append(int(event_id))
            event_id = None
    return seqs


async def stream_from(
    session: aiohttp.ClientSession, path: str, not_on: str | None, last: int | None
) -> tuple[aiohttp.ClientResponse, str]:
    """Open the event stream through HAProxy on a replica other than ``not_on``."""
    headers = {**AUTH, "Accept": "text/event-stream"}
    if last is not None:
        headers["Last-Event-ID"] = str(last)
    for _ in range(10):
        response = await session.get(BASE + path, headers=headers)
        served = response.headers.get("X-Served-By", "")
        check(response.status == 200, f"stream {path}: {response.status}")
        if served != not_on:
            return response, served
        response.close()
    raise SmokeFailure("HAProxy never sent the stream to the other replica")


async def resumed_streams(session: aiohttp.ClientSession, agent: str, tasks: int = 10) -> int:
    checked = 0
    figures = Figures()
    for n in range(tasks):
        status, data, _ = await keyed(
            session, figures, f"/v1/a2a/{agent}/messages", {"text": f"weather {n}?"}
        )
        check(status == 200, f"start: {status} {data}")
        task = data["result"]["task"]["id"]
        path = f"/v1/a2a/{agent}/tasks/{task}/events"
        first, served = await stream_from(session, path, None, None)
        got = await read_events(first, 1)
        first.close()
        check(got == [1], f"first stream of {task}: {got}")
        status, data, _ = await keyed(
            session, figures, f"/v1/a2a/{agent}/tasks/{task}/messages", {"text": "Paris"}
        )
        check(status == 200, f"follow-up: {status} {data}")
        second, other = await stream_from(session, path, served, got[-1])
        rest = await read_events(second, None)
        second.close()
        check(other != served, "resumed on the same replica")
        check(rest == [2], f"resumed stream of {task} on {other} after 1: {rest} (want [2])")
        checked += len(got) + len(rest)
    print(f"   {tasks} streams resumed on the other replica, {checked} events checked")
    return checked


# ---- 3./4. steady load while something restarts ---------------------------------------------


@dataclass
class Load:
    agent: str
    figures: Figures = field(default_factory=Figures)
    tasks: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def client(self, session: aiohttp.ClientSession, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            status, data, headers = await keyed(
                session, self.figures, f"/v1/a2a/{self.agent}/messages", {"text": f"c{n} {i}?"}
            )
            check(status == 200, f"start: {status} {data}")
            task = data["result"]["task"]["id"]
            self.tasks.append(task)
            status, data, headers = await keyed(
                session,
                self.figures,
                f"/v1/a2a/{self.agent}/tasks/{task}/messages",
                {"text": "Paris"},
            )
            check(status == 200, f"follow-up of {task}: {status} {data}")
            check(headers.get("A2A-Task-State") == "completed", f"{task}: {headers}")

    async def verify(self, session: aiohttp.ClientSession, strict: bool) -> tuple[int, int, int]:
        """No task followed up twice; every one recorded completed when ``strict``. Return
        the events checked, the follow-ups answered but not recorded, and the claims taken
        in the outage but never used (their commit's answer was lost: the retry found the
        claim, waited for it to expire and took it over, logged as `claim-expired`)."""
        checked = unrecorded = expired = 0
        for task in self.tasks:
            status, data, _ = await call(
                session, "GET", f"/v1/a2a/{self.agent}/tasks/{task}/events?after=0&limit=50"
            )
            check(status == 200, f"events of {task}: {status}")
            kinds = [e["type"] for e in data["events"]]
            checked += len(kinds)
            if kinds == ["task_created"] and not strict:
                unrecorded += 1
                continue
            lost_claim = kinds == ["task_created", "task_continue_failed", "task_continued"]
            if lost_claim and not strict:
                reason = data["events"][1]["data"].get("reason")
                check(reason == "claim-expired", f"task {task}: a follow-up failed ({reason})")
                expired += 1
                kinds = ["task_created", "task_continued"]
            check(
                kinds == ["task_created", "task_continued"],
                f"task {task}: events {kinds} (a follow-up lost or recorded twice)",
            )
            check(data["events"][-1]["newState"] == "completed", f"{task} not completed")
        return checked, unrecorded, expired


async def under_load(
    session: aiohttp.ClientSession,
    agent: str,
    what: str,
    action: Any,
    clients: int = 4,
    strict: bool = True,
) -> None:
    load = Load(agent)
    runners = [asyncio.create_task(load.client(session, n)) for n in range(clients)]
    try:
        await asyncio.sleep(3)  # load before
        await asyncio.to_thread(action)
        await asyncio.sleep(3)  # and after
    finally:
        load.stop.set()
    await asyncio.gather(*runners)
    checked, unrecorded, expired = await load.verify(session, strict)
    check(load.figures.statuses.get(500, 0) == 0, "a 500")
    print("   " + load.figures.line(what))
    print(
        f"   {len(load.tasks)} tasks, none followed up twice, {checked} events checked;"
        f" follow-ups answered but not recorded (their recording met the outage): {unrecorded};"
        f" claims lost to the outage, expired and taken over: {expired}"
    )


def wait_healthy(service: str, limit_s: float = 120) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        state = compose("ps", "--format", "{{.Service}} {{.Health}}", service).split()
        if state[-1:] == ["healthy"]:
            return
        time.sleep(1)
    raise SmokeFailure(f"{service} not healthy again within {limit_s} s")


def wait_in_rotation(services: list[str], limit_s: float = 60) -> None:
    """Until HAProxy has sent a /readyz to each of ``services`` (its checks mark a replica
    up two seconds after it is healthy)."""
    seen: set[str] = set()
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(BASE + "/readyz", timeout=5) as response:
                seen.add(response.headers.get("X-Served-By", ""))
        except OSError:  # a 503 (HTTPError) too
            pass
        if seen.issuperset(services):
            return
        time.sleep(0.2)
    raise SmokeFailure(f"HAProxy did not route to {services} within {limit_s} s (saw {seen})")


def rolling_restart() -> None:
    for service in REPLICAS:
        began = time.monotonic()
        compose("stop", "--timeout", "30", service)
        compose("start", service)
        wait_healthy(service)
        wait_in_rotation([service])
        took = time.monotonic() - began
        print(f"   {service}: SIGTERM, drained, started, healthy and in rotation in {took:.1f} s")


def restart_pgbouncer() -> None:
    began = time.monotonic()
    compose("restart", "--timeout", "5", "pgbouncer")
    print(f"   pgbouncer restarted in {time.monotonic() - began:.1f} s")


# ---- 5. a replica SIGKILLed while it watches ---------------------------------------------------


class Receiver:
    """A push webhook: the deliveries it got, by delivery id."""

    def __init__(self) -> None:
        self.got: dict[str, dict[str, Any]] = {}
        self.url = ""
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def hook(request: web.Request) -> web.Response:
            self.got[request.headers.get("A2A-Delivery-Id", "")] = await request.json()
            return web.Response(status=204)

        app = web.Application()
        app.router.add_post("/hook", hook)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"


async def killed_replica(session: aiohttp.ClientSession, slow_agent: str, count: int = 6) -> None:
    receiver = Receiver()
    if PUSH:
        await receiver.start()
    figures = Figures()
    tasks: list[str] = []
    victim = "gateway-1"
    for n in range(count):
        status, data, _ = await call(
            session,
            "POST",
            f"/v1/a2a/{slow_agent}/messages",
            {"text": f"slow {n}?", "configuration": {"returnImmediately": True}},
            base=REPLICAS[victim],
        )
        check(status == 200, f"start on {victim}: {status} {data}")
        check(data["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING", f"{data}")
        tasks.append(data["result"]["task"]["id"])
    configs: dict[str, str] = {}
    if PUSH:
        for task in tasks:
            status, data, _ = await call(
                session,
                "POST",
                f"/v1/a2a/{slow_agent}/tasks/{task}/push-configs",
                {"url": receiver.url},
                base=REPLICAS[victim],
            )
            check(status == 201, f"push config of {task}: {status} {data}")
            configs[task] = data["id"]
    compose("kill", "--signal", "SIGKILL", victim)
    killed = time.monotonic()
    print(f"   {victim} SIGKILLed while watching {count} working tasks")
    pending = set(tasks)
    while pending and time.monotonic() - killed < 90:
        for task in list(pending):
            figures.requests += 1
            try:
                status, data, _ = await call(session, "GET", f"/v1/a2a/{slow_agent}/tasks/{task}")
            except (TimeoutError, aiohttp.ClientError):
                figures.connection_errors += 1
                continue
            figures.statuses[status] = figures.statuses.get(status, 0) + 1
            check(status != 500, f"GET {task}: 500")
            if status == 200 and data["state"] == "input-required":
                pending.discard(task)
        await asyncio.sleep(0.5)
    check(not pending, f"tasks never taken over: {sorted(pending)}")
    print(
        f"   the other replica took them over: all {count} input-required"
        f" {time.monotonic() - killed:.1f} s after the kill ({figures.requests} reads)"
    )
    if PUSH:
        await pushed_after_kill(session, slow_agent, configs, receiver, killed)
        assert receiver.runner is not None
        await receiver.runner.cleanup()
    compose("start", victim)
    wait_healthy(victim)


async def pushed_after_kill(
    session: aiohttp.ClientSession,
    agent: str,
    configs: dict[str, str],
    receiver: Receiver,
    killed: float,
) -> None:
    for task, config in configs.items():
        path = f"/v1/a2a/{agent}/tasks/{task}/push-configs/{config}/deliveries"
        end = time.monotonic() + 90
        while True:
            status, data, _ = await call(session, "GET", path)
            check(status == 200, f"deliveries of {task}: {status} {data}")
            states = [d["state"] for d in data["deliveries"]]
            if states and all(s == "delivered" for s in states):
                break
            check(time.monotonic() < end, f"deliveries of {task} not delivered: {states}")
            await asyncio.sleep(0.5)
        ids = {d["id"] for d in data["deliveries"]}
        check(
            ids <= set(receiver.got), f"{task}: deliveries not received {ids - set(receiver.got)}"
        )
        bodies = [json.dumps(receiver.got[i]) for i in ids]
        check(any("INPUT_REQUIRED" in b for b in bodies), f"{task}: input-required not pushed")
    print(
        f"   push deliveries of the {len(configs)} tasks delivered by the survivor"
        f" ({len(receiver.got)} received, {time.monotonic() - killed:.1f} s after the kill)"
    )


# ---------------------------------------------------------------------------------------------


async def proofs() -> None:
    async with aiohttp.ClientSession() as session:
        agent = await register(session, AGENT_URL, "weather")
        slow = await register(session, SLOW_AGENT_URL, "slow weather")

        began = time.monotonic()
        print("== 2. event streams resumed with Last-Event-ID on the other replica")
        await resumed_streams(session, agent)
        print(f"   ({time.monotonic() - began:.1f} s)")

        began = time.monotonic()
        print("== 3. rolling restart of every replica under steady load")
        await under_load(session, agent, "rolling restart", rolling_restart)
        print(f"   ({time.monotonic() - began:.1f} s)")

        began = time.monotonic()
        print("== 4. PgBouncer restart under steady load")
        await under_load(session, agent, "PgBouncer restart", restart_pgbouncer, strict=False)
        print(f"   ({time.monotonic() - began:.1f} s)")

        began = time.monotonic()
        print("== 5. a replica SIGKILLed while it watches tasks" + (" (and push)" if PUSH else ""))
        await killed_replica(session, slow)
        print(f"   ({time.monotonic() - began:.1f} s)")


def main() -> int:
    try:
        began = time.monotonic()
        wait_in_rotation(list(REPLICAS))
        print("== 1. the README walkthrough through HAProxy")
        walkthrough()
        print(f"   ({time.monotonic() - began:.1f} s)")
        asyncio.run(proofs())
    except SmokeFailure as exc:
        print(f"compose-ha-smoke: {exc}", file=sys.stderr)
        return 1
    print("compose-ha-smoke: every proof held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
