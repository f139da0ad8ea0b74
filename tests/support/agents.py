"""An agent registered with the gateway as the follow-up tests drive it: register, start,
read its events, and everything a refused request must leave as it was."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from tests.support.client import Client
from tests.support.fakes import Handler, StartFake

JSON = dict[str, Any]
TERMINAL_TYPE = "urn:a2a-continue:problem:task-terminal"
BUSY_TYPE = "urn:a2a-continue:problem:task-busy"


@dataclass
class Agent:
    """An agent registered with the gateway, and the requests it has received."""

    id: str
    version: str
    received: list[JSON]

    def messages(self, task_id: str) -> str:
        return f"/v1/a2a/{self.id}/tasks/{task_id}/messages"

    def task(self, task_id: str) -> str:
        return f"/v1/a2a/{self.id}/tasks/{task_id}"

    def sent(self) -> JSON:
        """The message of the last request the agent received."""
        message: JSON = self.received[-1]["params"]["message"]
        return message


async def register(
    client: Client, url: str, version: str, received: list[JSON], **extra: Any
) -> Agent:
    body = {"name": "weather", "endpointUrl": url, "protocolVersion": version, **extra}
    r = await client.call("POST", "/v1/a2a/agents", body)
    assert r.status == 201, r.raw
    return Agent(r.json()["id"], version, received)


async def register_fake(
    client: Client, fake_agent: StartFake, handler: Handler, version: str = "1.0", **extra: Any
) -> Agent:
    fake = await fake_agent(handler)
    return await register(client, fake.url, version, fake.received, **extra)


async def start(client: Client, agent: Agent, text: str = "weather?", **extra: Any) -> JSON:
    """Start a task through the gateway; return it as the gateway stored it."""
    r = await client.call("POST", f"/v1/a2a/{agent.id}/messages", {"text": text, **extra})
    assert r.status == 200, r.raw
    result = r.json()["result"]
    task_id = result["task"]["id"] if "task" in result else result["id"]
    r = await client.call("GET", agent.task(task_id))
    assert r.status == 200, r.raw
    task: JSON = r.json()
    return task


async def events(client: Client, agent: Agent, task_id: str) -> list[JSON]:
    r = await client.call("GET", agent.task(task_id) + "/events")
    assert r.status == 200, r.raw
    found: list[JSON] = r.json()["events"]
    return found


async def footprint(db: asyncpg.Connection, agent: Agent) -> tuple[Any, ...]:
    """Everything a follow-up could touch: task rows (claims included), events, agent calls."""
    tasks = [dict(r) for r in await db.fetch("SELECT * FROM a2a_tasks ORDER BY id")]
    logged = [dict(r) for r in await db.fetch("SELECT * FROM a2a_task_events ORDER BY task, seq")]
    return tasks, logged, len(agent.received)
