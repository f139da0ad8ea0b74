"""``a2a-continue demo``: two turns of a task through a gateway and a sample agent, blocking,
then streamed while a live event stream watches the task."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from a2a_continue.app import create_app
from a2a_continue.core.access.callers import mint_token
from a2a_continue.core.schema import migrate_url
from a2a_continue.ops.embedded import embedded_database
from a2a_continue.ops.sample_agent import start_sample_agent
from a2a_continue.ops.serving import serve_in_loop
from a2a_continue.runtime.secrets import new_key
from a2a_continue.settings import Settings


def show(title: str, value: Any) -> None:
    """Print one step of the demo."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2)
    print(f"\n== {title}\n{text}", flush=True)


class Caller:
    """A REST caller of the gateway that prints every exchange."""

    def __init__(self, session: aiohttp.ClientSession, base: str, token: str) -> None:
        self.session, self.base = session, base
        self.headers = {"Authorization": f"Bearer {token}"}

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, str]:
        """Send one request; return status, decoded body and the task-state header."""
        show(f"request: {method} {path}", body if body is not None else "(no body)")
        url = self.base + path
        async with self.session.request(method, url, json=body, headers=self.headers) as r:
            answer = await r.json(content_type=None)
            state = r.headers.get("A2A-Task-State", "")
        show(f"response: {r.status}" + (f"  A2A-Task-State: {state}" if state else ""), answer)
        return r.status, answer, state

    async def stream(
        self, method: str, path: str, body: Any = None, label: str = "stream"
    ) -> list[tuple[str, Any]]:
        """Send one request asking for `text/event-stream`; print each event as it arrives."""
        show(f"{label} request: {method} {path}  Accept: text/event-stream", body or "(no body)")
        headers = {**self.headers, "Accept": "text/event-stream"}
        received: list[tuple[str, Any]] = []
        url = self.base + path
        async with self.session.request(method, url, json=body, headers=headers) as r:
            name = ""
            async for raw in r.content:
                line = raw.decode().rstrip("\r\n")
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    data = json.loads(line.removeprefix("data: "))
                    received.append((name, data))
                    show(f"{label} event: {name}", data)
        return received


async def two_turns(settings: Settings) -> bool:
    """Register the sample agent, start a task, answer its question; return success."""
    runner, agent_url = await start_sample_agent()
    token = mint_token(settings.jwt_secret, "demo@example.com", ["*"])
    try:
        async with (
            serve_in_loop(create_app(settings)) as base,
            aiohttp.ClientSession() as session,
        ):
            print(f"gateway on {base}, sample agent on {agent_url}", flush=True)
            caller = Caller(session, base, token)
            agent = {
                "name": "weather",
                "endpointUrl": agent_url,
                "protocolVersion": "1.0",
                "capabilities": {"streaming": True},
            }
            _, registered, _ = await caller.call("POST", "/v1/a2a/agents", agent)
            agent_id = registered["id"]
            first = {"text": "What will the weather be tomorrow?"}
            _, answer, asked = await caller.call("POST", f"/v1/a2a/{agent_id}/messages", first)
            task_id = answer["result"]["task"]["id"]
            path = f"/v1/a2a/{agent_id}/tasks/{task_id}"
            _, _, done = await caller.call("POST", path + "/messages", {"text": "Paris"})
            _, log, _ = await caller.call("GET", path + "/events")
            streamed = await streamed_turns(caller, agent_id)
    finally:
        await runner.cleanup()
    types = [event["type"] for event in log["events"]]
    return streamed and (asked, done, types) == (
        "input-required",
        "completed",
        ["task_created", "task_continued"],
    )


async def streamed_turns(caller: Caller, agent_id: str) -> bool:
    """Both turns again, streamed, while a live event stream follows the task to its end."""
    print("\n\n######## the same two turns, streamed", flush=True)
    first = {"text": "And the day after?"}
    started = await caller.stream("POST", f"/v1/a2a/{agent_id}/messages", first)
    task_id = started[0][1]["result"]["task"]["id"]
    path = f"/v1/a2a/{agent_id}/tasks/{task_id}"
    watching = asyncio.create_task(caller.stream("GET", path + "/events", label="live"))
    await asyncio.sleep(0.2)  # the live stream replays the start's events first
    answered = await caller.stream("POST", path + "/messages", {"text": "Lyon"})
    async with asyncio.timeout(30):
        watched = await watching
    return (
        [name for name, _ in started] == ["task", "status-update"]
        and [name for name, _ in answered]
        == ["status-update", "artifact-update", "artifact-update", "status-update"]
        and [name for name, _ in watched][-1] == "task_updated"
        and watched[-1][1]["newState"] == "completed"
    )


def run_demo() -> int:
    """Run the demo on a throwaway embedded PostgreSQL; exit status 0 when both turns work."""
    with (
        tempfile.TemporaryDirectory(prefix="a2a-continue-demo-") as tmp,
        embedded_database(Path(tmp)) as url,
    ):
        asyncio.run(migrate_url(url))
        settings = Settings(
            database_url=url, jwt_secret=new_key(), encryption_key=new_key(), pool_size=2
        )
        ok = asyncio.run(two_turns(settings))
    print("\ndemo " + ("succeeded" if ok else "FAILED"), flush=True)
    return 0 if ok else 1
