"""The one reader of what agents answer: every answer and every frame is read once per call."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest
from aiohttp import web

from a2a_continue.a2a import answers
from tests.support.client import Client, register
from tests.support.facade_clients import rpc
from tests.support.rpc import message_v10
from tests.support.servers import serve_aiohttp
from tests.support.streams import STREAMING, post_stream

JSON = dict[str, Any]


def task(task_id: str, state: str) -> JSON:
    return {"task": {"id": task_id, "contextId": "C", "status": {"state": state}}}


STREAMED = [
    task("T1", "TASK_STATE_WORKING"),
    {"statusUpdate": {"taskId": "T1", "status": {"state": "TASK_STATE_WORKING"}}},
    {"artifactUpdate": {"taskId": "T1", "artifact": {"artifactId": "a", "parts": [{"text": "x"}]}}},
    {"statusUpdate": {"taskId": "T1", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}},
]


class Agent:
    """A 1.0 agent whose every answer and frame carries a serial number, to tell them apart."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.starts = 0

    def answer(self, request: JSON, result: JSON) -> bytes:
        self.sent.append(len(self.sent))
        body = {"jsonrpc": "2.0", "id": request["id"], "result": result, "serial": self.sent[-1]}
        return json.dumps(body).encode()

    async def endpoint(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        method = body["method"]
        if method == "SendStreamingMessage":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for result in STREAMED:
                await response.write(b"data: " + self.answer(body, result) + b"\n\n")
            return response
        if method == "CancelTask":
            result = task(body["params"]["id"], "TASK_STATE_CANCELED")
        elif method == "GetTask":
            result = task(body["params"]["id"], "TASK_STATE_INPUT_REQUIRED")
        else:
            task_id = body["params"]["message"].get("taskId")
            if task_id is None:
                self.starts += 1
                task_id = f"T{self.starts}"
            result = task(task_id, "TASK_STATE_INPUT_REQUIRED")
        return web.Response(body=self.answer(body, result), content_type="application/json")


async def test_each_agent_answer_and_each_frame_is_read_once(
    client: Client, db: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    read, seen = answers.read, []

    def counted(body: object, version: str, *, frame: bool = False) -> answers.Update:
        seen.append(body.get("serial") if isinstance(body, dict) else None)
        return read(body, version, frame=frame)

    monkeypatch.setattr(answers, "read", counted)
    fake = Agent()
    app = web.Application()
    app.router.add_post("/", fake.endpoint)
    async with serve_aiohttp(app) as base:
        agent = await register(client, base + "/", "1.0", capabilities=STREAMING)
        started = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
        path = f"/v1/a2a/{agent}/tasks/T1"
        followed = await client.call("POST", path + "/messages", {"text": "Paris"})
        streamed = await post_stream(client, path + "/messages", {"text": "again"})
        facade = await rpc(client, agent, "SendMessage", message_v10("hi"), version="1.0")
        got = await rpc(client, agent, "GetTask", {"id": "T2"}, version="1.0")
        refreshed = await client.call("GET", f"/v1/a2a/{agent}/tasks/T2?refresh=true")
        canceled = await client.call("POST", path + "/cancel")
    assert [started.status, followed.status, streamed.status] == [200, 200, 200]
    assert [e.event for e in streamed.events] == [
        "task",
        "status-update",
        "artifact-update",
        "status-update",
    ]
    assert facade.json()["result"]["task"]["id"] == "T2"
    assert got.json()["result"]["id"] == "T2"
    assert [refreshed.status, canceled.status] == [200, 200]
    assert len(fake.sent) == 10
    assert sorted(seen) == fake.sent


async def test_a_send_left_to_the_watcher_is_read_once_for_its_hand_over(
    client: Client, db: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    read, seen = answers.read, []

    def counted(body: object, version: str, *, frame: bool = False) -> answers.Update:
        seen.append(body.get("serial") if isinstance(body, dict) else None)
        return read(body, version, frame=frame)

    monkeypatch.setattr(answers, "read", counted)
    fake = Agent()
    app = web.Application()
    app.router.add_post("/", fake.endpoint)
    async with serve_aiohttp(app) as base:
        agent = await register(client, base + "/", "1.0")
        body = {"text": "hi", "configuration": {"returnImmediately": True}}
        started = await client.call("POST", f"/v1/a2a/{agent}/messages", body)
        assert started.status == 200
        assert await db.fetchval("SELECT watch_past IS NOT NULL FROM a2a_tasks") is True
    assert seen.count(0) == 1
