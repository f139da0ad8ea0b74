"""Streamed starts and follow-ups (§8.2): posting one, the frames a fake agent writes, and
what the store recorded."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from tests.support.client import Client
from tests.support.database import TASKS_WITH_CLAIMS
from tests.support.fakes import Script
from tests.support.sse_client import Event, all_events

JSON = dict[str, Any]


STREAM = {"Accept": "text/event-stream"}


STREAMING = {"streaming": True}


@dataclass
class Streamed:
    """A streamed answer: the status, headers, and its events (or its problem body)."""

    status: int
    headers: Any
    events: list[Event]
    raw: bytes = b""


async def post_stream(client: Client, path: str, body: JSON) -> Streamed:
    headers = {"Authorization": f"Bearer {client.bearer}", **STREAM}
    async with client.session.post(client.base + path, json=body, headers=headers) as r:
        if r.content_type != "text/event-stream":
            return Streamed(r.status, r.headers, [], await r.read())
        return Streamed(r.status, r.headers, await all_events(r))


async def task_events(db: asyncpg.Connection, task_id: str) -> list[tuple[Any, ...]]:
    rows = await db.fetch(
        "SELECT e.type, e.previous_state, e.new_state, e.data FROM a2a_task_events e"
        " JOIN a2a_tasks t ON t.id = e.task WHERE t.task_id = $1 ORDER BY e.seq",
        task_id,
    )
    return [(r["type"], r["previous_state"], r["new_state"], r["data"]) for r in rows]


async def task_row(db: asyncpg.Connection, task_id: str) -> asyncpg.Record:
    row = await db.fetchrow(
        "SELECT state, status_message, artifacts, token AS claim_token"
        f" FROM {TASKS_WITH_CLAIMS} WHERE task_id = $1",
        task_id,
    )
    assert row is not None
    return row


def task_of(event: Event) -> str:
    result = event.json()["result"]
    return str(result["task"]["id"] if "task" in result else result["id"])


def frame(request: JSON, result: JSON) -> bytes:
    """A frame with unusual spacing, so that relaying it unchanged is visible."""
    body = {"jsonrpc": "2.0", "id": request["id"], "result": result}
    return json.dumps(body, separators=(" ,", " : ")).encode()


def status(task_id: str, state: str, **extra: Any) -> JSON:
    return {
        "statusUpdate": {"taskId": task_id, "contextId": "C", "status": {"state": state}, **extra}
    }


def snapshot(task_id: str, state: str) -> JSON:
    return {"task": {"id": task_id, "contextId": "C", "status": {"state": state}}}


async def start_task(client: Client, agent: str, task_id: str = "T") -> None:
    r = await post_stream(client, f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    assert task_of(r.events[0]) == task_id


def interrupted_then(rest: Script) -> Script:
    """A first turn that pauses in input-required; ``rest`` answers the follow-ups."""

    async def script(request: JSON, send: Callable[[bytes], Awaitable[None]]) -> None:
        if "taskId" not in request["params"]["message"]:
            await send(frame(request, snapshot("T", "TASK_STATE_INPUT_REQUIRED")))
            return
        await rest(request, send)

    return script
