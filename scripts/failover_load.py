"""What the drills of `make compose-failover-smoke` (scripts/compose_failover_smoke.py) share:
Patroni's view of the cluster, the clients' keyed writes (retried with their key on either
replica, every attempt and its status kept), and the push receiver.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

# The HA smoke's helpers read their settings when imported: give them this stack's.
_FO = os.environ
for _name, _value in {
    "HA_COMPOSE": _FO["FO_COMPOSE"],
    "HA_GATEWAY_PORT": _FO["FO_GW1"],
    "HA_GW1_PORT": _FO["FO_GW1"],
    "HA_GW2_PORT": _FO["FO_GW2"],
    "HA_AGENT_PORT": _FO["FO_AGENT"],
    "HA_SLOW_AGENT_PORT": _FO["FO_SLOW_AGENT"],
    "HA_JWT_SECRET": _FO["FO_JWT_SECRET"],
    "HA_RUN": _FO["FO_RUN"],
}.items():
    os.environ.setdefault(_name, _value)

from compose_ha_smoke import (  # noqa: E402
    AGENT_URL,
    AUTH,
    IN_FLIGHT,
    REPLICAS,
    RETRIED,
    SLOW_AGENT_URL,
    SmokeFailure,
    call,
    check,
    compose,
    register,
)

__all__ = [
    "AGENT_URL",
    "AUTH",
    "SLOW_AGENT_URL",
    "SmokeFailure",
    "call",
    "check",
    "compose",
    "register",
]

NODES = {f"pg{n}": int(_FO[f"FO_PG{n}_API"]) for n in (1, 2, 3)}
DSN = f"postgresql://a2ac:a2ac@127.0.0.1:{_FO['FO_HAPROXY']}/a2ac"
BASES = list(REPLICAS.values())
PATRONICTL = ["patronictl", "-c", "/etc/patroni/patroni.yml"]


# ---- Patroni -----------------------------------------------------------------------------------


def cluster() -> list[dict[str, Any]]:
    """The members as Patroni's REST API lists them (any node that answers)."""
    for port in NODES.values():
        try:
            url = f"http://127.0.0.1:{port}/cluster"
            with urllib.request.urlopen(url, timeout=2) as response:
                members: list[dict[str, Any]] = json.load(response)["members"]
                return members
        except OSError:
            continue
    raise SmokeFailure("no Patroni REST API answers")


def leader() -> str | None:
    for member in cluster():
        if member["role"] == "leader" and member["state"] == "running":
            return str(member["name"])
    return None


def wait_until(what: str, test: Callable[[], bool], limit_s: float = 90) -> float:
    """Poll ``test`` every 0.2 s until it holds; return when it did (monotonic)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            if test():
                return time.monotonic()
        except (SmokeFailure, OSError, ValueError):
            pass
        time.sleep(0.2)
    raise SmokeFailure(f"no {what} within {limit_s} s: {cluster()}")


def healthy_replicas() -> int:
    return sum(
        1
        for m in cluster()
        if m["role"] in ("replica", "sync_standby") and m["state"] in ("running", "streaming")
    )


def patronictl(node: str, *args: str) -> str:
    return compose("exec", "-T", node, *PATRONICTL, *args, limit=120)


def members_line() -> str:
    return ", ".join(f"{m['name']} {m['role']} {m['state']}" for m in cluster())


# ---- clients -------------------------------------------------------------------------------------


@dataclass
class Figures:
    """What the clients of one drill saw: every attempt, and what they were told."""

    statuses: Counter[str] = field(default_factory=Counter)
    writes: list[tuple[float, float, int, bool]] = field(default_factory=list)  # sent, done
    followed: set[str] = field(default_factory=set)  # follow-ups answered 200
    tasks: list[str] = field(default_factory=list)
    no_retry_after: int = 0
    turn: int = 0

    def base(self) -> str:
        self.turn += 1
        return BASES[self.turn % len(BASES)]


async def keyed(
    session: aiohttp.ClientSession,
    figures: Figures,
    path: str,
    body: Any,
    deadline_s: float = 120,
) -> tuple[int, Any, Any]:
    """One keyed write, retried with its key (on either replica) until it has an answer that
    is not a retry."""
    key = os.urandom(16).hex()
    end = time.monotonic() + deadline_s
    while True:
        sent = time.monotonic()
        try:
            status, data, headers = await call(
                session, "POST", path, body, {"Idempotency-Key": key}, base=figures.base()
            )
        except (TimeoutError, aiohttp.ClientError):
            figures.statuses["connection error"] += 1
            check(time.monotonic() < end, f"POST {path}: no answer within {deadline_s} s")
            await asyncio.sleep(0.2)
            continue
        figures.statuses[str(status)] += 1
        replayed = headers.get("Idempotent-Replayed") == "true"
        figures.writes.append((sent, time.monotonic(), status, replayed))
        if status == 503 and "Retry-After" not in headers:
            figures.no_retry_after += 1
        again = status in RETRIED or (
            status == 409 and isinstance(data, dict) and data.get("type") == IN_FLIGHT
        )
        if again and time.monotonic() < end:
            await asyncio.sleep(0.2)
            continue
        return status, data, headers


async def start(session: aiohttp.ClientSession, figures: Figures, agent: str, text: str) -> str:
    status, data, _ = await keyed(session, figures, f"/v1/a2a/{agent}/messages", {"text": text})
    check(status == 200, f"start: {status} {data}")
    return str(data["result"]["task"]["id"])


async def follow_up(
    session: aiohttp.ClientSession, figures: Figures, agent: str, task: str
) -> None:
    path = f"/v1/a2a/{agent}/tasks/{task}/messages"
    status, data, headers = await keyed(session, figures, path, {"text": "Paris"})
    check(status == 200, f"follow-up of {task}: {status} {data}")
    check(headers.get("A2A-Task-State") == "completed", f"{task}: {headers}")
    figures.followed.add(task)


async def push_config(
    session: aiohttp.ClientSession, figures: Figures, agent: str, task: str, url: str
) -> str:
    status, data, _ = await keyed(
        session, figures, f"/v1/a2a/{agent}/tasks/{task}/push-configs", {"url": url}
    )
    check(status == 201, f"push config of {task}: {status} {data}")
    return str(data["id"])


# ---- the push receiver ------------------------------------------------------------------------


class Receiver:
    """A push webhook on 127.0.0.1: every delivery it got, by A2A-Delivery-Id."""

    def __init__(self) -> None:
        self.got: Counter[str] = Counter()
        self.bodies: dict[str, str] = {}
        self.url = ""
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def hook(request: web.Request) -> web.Response:
            delivery = request.headers.get("A2A-Delivery-Id", "")
            self.got[delivery] += 1
            self.bodies[delivery] = (await request.read()).decode(errors="replace")
            return web.Response(status=204)

        app = web.Application()
        app.router.add_post("/hook", hook)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
