"""Benchmark of push in (SPEC §19): what following long tasks costs an agent that pushes, and
how soon a push reaches a live event stream.

Three processes: a 1.0 agent that pushes (an aiohttp app in this file: it answers a send with
a task left `working`, keeps the push config it is given, answers `GetTask` with the task's
status, and on a driver's `/tick` changes one task's status and pushes it), the gateway (the
real ``a2a-continue serve``, its public URL its own loopback address) and this script.
- Two phases of ``--tasks`` (200) tasks started with `returnImmediately` and left `working`
  for ``--seconds`` (60): the agent registered as pushing (push in), then as not (polling);
  the agent's `GetTask` calls in each phase.
- During the push phase, ``--streamed`` (20) of the tasks each have a live event stream open;
  the agent pushes a status change to one of them ``--rate`` (10) times a second (each task
  one at a time); from the push's send to its `task_updated` event in the task's stream,
  p50/p99 (one machine, one clock).
Usage:
    python bench/push_in_bench.py [--tasks 200] [--seconds 60] [--streamed 20] [--rate 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from continue_bench import database, free_port, percentile, process, wait_listening

ROOT = Path(__file__).resolve().parent.parent
JSON = dict[str, Any]


# ---- the agent ------------------------------------------------------------------------------


def run_agent(port: int) -> None:
    """Serve the pushing agent at ``/push/`` and ``/poll/`` (one registration each)."""
    import msgspec
    import uvloop

    tasks: dict[str, JSON] = {}
    configs: dict[str, JSON] = {}
    gets: dict[str, int] = {"push": 0, "poll": 0}
    session: list[aiohttp.ClientSession] = []

    def task_of(task_id: str) -> JSON:
        return {"id": task_id, "contextId": "C", "status": tasks[task_id]}

    def answer(request: JSON, result: Any) -> web.Response:
        body = {"jsonrpc": "2.0", "id": request["id"], "result": result}
        return web.Response(body=msgspec.json.encode(body), content_type="application/json")

    async def rpc(request: web.Request) -> web.Response:
        body = msgspec.json.decode(await request.read())
        method, params = body["method"], body.get("params", {})
        if method == "SendMessage":
            task_id = str(uuid.uuid4())
            tasks[task_id] = {"state": "TASK_STATE_WORKING"}
            config = params.get("configuration", {}).get("taskPushNotificationConfig")
            if config is not None:
                configs[task_id] = config
            return answer(body, {"task": task_of(task_id)})
        if method == "GetTask":
            gets[request.match_info["kind"]] += 1
            return answer(body, task_of(params["id"]))
        if method == "CreateTaskPushNotificationConfig":
            configs[params["taskId"]] = params
            return answer(body, params)
        if method == "DeleteTaskPushNotificationConfig":
            configs.pop(params["taskId"], None)
            return answer(body, {})
        error = {"code": -32601, "message": "method not found"}
        return web.Response(
            body=msgspec.json.encode({"jsonrpc": "2.0", "id": body["id"], "error": error}),
            content_type="application/json",
        )

    async def tick(request: web.Request) -> web.Response:
        """Change a task's status and push it; answer when the push was sent (its time)."""
        task_id = request.query["task"]
        text = str(uuid.uuid4())
        message = {"messageId": text, "role": "ROLE_AGENT", "parts": [{"text": text}]}
        tasks[task_id] = {"state": "TASK_STATE_WORKING", "message": message}
        config = configs[task_id]
        push = {"statusUpdate": {"taskId": task_id, "contextId": "C", "status": tasks[task_id]}}
        sent = time.time()
        headers = {"X-A2A-Notification-Token": config["token"]}
        async with session[0].post(config["url"], json=push, headers=headers) as r:
            await r.read()
            status = r.status
        return web.json_response({"sent": sent, "status": status})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(gets)

    async def serve() -> None:
        session.append(aiohttp.ClientSession())
        app = web.Application()
        app.router.add_post("/{kind:push|poll}/", rpc)
        app.router.add_post("/tick", tick)
        app.router.add_get("/stats", stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    uvloop.run(serve())


# ---- the driver -----------------------------------------------------------------------------


async def _post(http: aiohttp.ClientSession, url: str, body: Any, auth: dict[str, str]) -> Any:
    async with http.post(url, json=body, headers=auth) as r:
        if r.status >= 300:
            raise RuntimeError(f"{url}: {r.status} {await r.text()}")
        return await r.json(content_type=None)


async def start_tasks(
    http: aiohttp.ClientSession, base: str, agent_url: str, auth: dict[str, str], n: int,
    pushes: bool,
) -> tuple[str, list[str]]:  # fmt: skip
    """Register the agent (pushing or not) and start ``n`` tasks left working."""
    capabilities = {"streaming": False, "pushNotifications": pushes}
    reg = {"name": "bench", "endpointUrl": agent_url, "protocolVersion": "1.0"}
    agent = (
        await _post(http, base + "/v1/a2a/agents", {**reg, "capabilities": capabilities}, auth)
    )["id"]
    body = {"text": "work", "configuration": {"returnImmediately": True}}
    started = []
    for _ in range(n):
        answer = await _post(http, f"{base}/v1/a2a/{agent}/messages", body, auth)
        started.append(answer["result"]["task"]["id"])
    return agent, started


async def gets(http: aiohttp.ClientSession, agent_url: str) -> dict[str, int]:
    async with http.get(agent_url + "/stats") as r:
        found: dict[str, int] = await r.json()
        return found


async def stream_latencies(
    http: aiohttp.ClientSession, args: argparse.Namespace, base: str, agent: str,
    task_ids: list[str], agent_url: str, auth: dict[str, str],
) -> list[float]:  # fmt: skip
    """Push to the streamed tasks at ``--rate`` for ``--seconds``; seconds push → event."""
    waits: list[float] = []
    deadline = time.monotonic() + args.seconds
    gap = len(task_ids) / args.rate

    async def one(task_id: str, offset: float) -> None:
        task = await (await http.get(f"{base}/v1/a2a/{agent}/tasks/{task_id}", headers=auth)).json()
        url = f"{base}/v1/a2a/{agent}/tasks/{task_id}/events?after={task['lastSeq']}"
        headers = {**auth, "Accept": "text/event-stream"}
        async with http.get(url, headers=headers, timeout=aiohttp.ClientTimeout(None)) as stream:
            await asyncio.sleep(offset)
            while time.monotonic() < deadline:
                began = time.monotonic()
                async with http.post(f"{agent_url}/tick?task={task_id}") as r:
                    sent = (await r.json())["sent"]
                while True:
                    line = (await stream.content.readline()).decode()
                    if line.startswith("event: task_updated"):
                        waits.append(time.time() - sent)
                        break
                await asyncio.sleep(max(0.0, gap - (time.monotonic() - began)))

    await asyncio.gather(*(one(t, i * gap / len(task_ids)) for i, t in enumerate(task_ids)))
    return sorted(waits)


async def measure(args: argparse.Namespace, base: str, agent_url: str, token: str) -> JSON:
    auth = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=args.streamed * 2 + 16)
    async with aiohttp.ClientSession(connector=connector) as http:
        # Push in: the agent pushes; the watcher checks each task once a check period.
        agent, started = await start_tasks(http, base, agent_url + "/push/", auth, args.tasks, True)
        before = (await gets(http, agent_url))["push"]
        waits = await stream_latencies(
            http, args, base, agent, started[: args.streamed], agent_url, auth
        )
        pushed = (await gets(http, agent_url))["push"] - before
        async with http.delete(f"{base}/v1/a2a/agents/{agent}", headers=auth) as r:
            await r.read()
        # Polling: the same tasks, the agent not registered as pushing.
        agent, started = await start_tasks(
            http, base, agent_url + "/poll/", auth, args.tasks, False
        )
        before = (await gets(http, agent_url))["poll"]
        await asyncio.sleep(args.seconds)
        polled = (await gets(http, agent_url))["poll"] - before
    return {"pushed": pushed, "polled": polled, "waits": waits}


def main() -> None:
    """Start the agent and the gateway; measure both phases; print the line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--streamed", type=int, default=20)
    parser.add_argument("--rate", type=float, default=10.0, help="pushes per second")
    parser.add_argument("--role", choices=["agent"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "agent":
        return run_agent(args.port)

    from a2a_continue.core.access.callers import mint_token
    from a2a_continue.core.schema import migrate_url
    from a2a_continue.runtime.secrets import new_key

    ports = {name: free_port() for name in ("agent", "gateway")}
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    secret = new_key() + new_key()
    with ExitStack() as stack:
        url, _ = stack.enter_context(database())
        asyncio.run(migrate_url(url))
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="a2ac-push-in-")))
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "A2AC_DATABASE_URL": url,
            "A2AC_JWT_SECRET": secret,
            "A2AC_ENCRYPTION_KEY": new_key(),
            "A2AC_HOST": "127.0.0.1",
            "A2AC_PORT": str(ports["gateway"]),
            "A2AC_PUBLIC_URL": urls["gateway"],
            # Every task of both phases followed by the one process (the first phase's are
            # let go at the next lease renewal after their agent is deleted).
            "A2AC_WATCH_CONCURRENCY": str(2 * args.tasks + 10),
            "A2AC_LOG_LEVEL": "warning",
        }
        agent = stack.enter_context(
            process(
                [sys.executable, __file__, "--role", "agent", "--port", str(ports["agent"])],
                env,
                logs / "agent",
            )
        )
        gateway = stack.enter_context(
            process([sys.executable, "-m", "a2a_continue", "serve"], env, logs / "gateway")
        )
        token = mint_token(secret, "bench@example.com", ["*"])
        import uvloop

        async def run() -> JSON:
            async with aiohttp.ClientSession() as http:
                await wait_listening(urls["gateway"] + "/healthz", http, gateway)
                await wait_listening(urls["agent"] + "/stats", http, agent)
            return await measure(args, urls["gateway"], urls["agent"], token)

        found = uvloop.run(run())
    waits = found["waits"]
    p50, p99 = (percentile(waits, q) for q in (0.50, 0.99)) if waits else (0.0, 0.0)
    pushed, polled = found["pushed"], found["polled"]
    fewer = f" (x{polled / pushed:.1f} fewer)" if pushed else ""
    print(
        f"push in: {args.tasks} tasks left working {args.seconds:g} s: the agent's GetTask calls"
        f" {pushed} with push in vs {polled} polling{fewer};"
        f" push → live stream p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(waits)} pushes at"
        f" {args.rate:g}/s on {args.streamed} streams)"
    )
    return None


if __name__ == "__main__":
    main()
