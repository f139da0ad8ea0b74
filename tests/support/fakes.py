"""Fake agents the tests script: what they answer, and the JSON-RPC bodies they build."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiohttp import web

JSON = dict[str, Any]


Handler = Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass
class FakeAgent:
    """A small aiohttp JSON-RPC agent whose answers the test scripts."""

    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


# How a test starts a fake agent (the fake_agent fixture).
StartFake = Callable[[Handler], Awaitable[FakeAgent]]


# What a streaming fake agent does with a request: write frames through the send function.
Script = Callable[[dict[str, Any], Callable[[bytes], Awaitable[None]]], Awaitable[None]]


@dataclass
class SseAgent:
    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)


def rpc_result(request: JSON, result: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def rpc_error(request: JSON, code: int, message: str) -> JSON:
    return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": code, "message": message}}


def text_part(version: str, text: str) -> JSON:
    return {"text": text} if version == "1.0" else {"kind": "text", "text": text}


def task_body(
    version: str,
    task_id: str,
    state: str,
    context_id: str | None = None,
    artifacts: list[str] | None = None,
) -> JSON:
    """A task as an agent of ``version`` answers it (the 1.0 one wrapped in ``task``)."""
    wire_state = "TASK_STATE_" + state.upper().replace("-", "_") if version == "1.0" else state
    task: JSON = {"id": task_id, "status": {"state": wire_state}}
    if context_id is not None:
        task["contextId"] = context_id
    if artifacts:
        task["artifacts"] = [
            {"artifactId": f"a{i}", "name": "forecast", "parts": [text_part(version, t)]}
            for i, t in enumerate(artifacts)
        ]
    return {"task": task} if version == "1.0" else {"kind": "task", **task}


def task_v10(task_id: str, state: str, context_id: str | None = "C1", text: str = "ok") -> JSON:
    """A 1.0 task answer carrying ``text`` in its status message and one artifact."""
    task: JSON = {
        "id": task_id,
        "status": {
            "state": "TASK_STATE_" + state.upper().replace("-", "_"),
            "message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": text}]},
        },
        "artifacts": [{"artifactId": "a1", "parts": [{"text": text}]}],
    }
    if context_id is not None:
        task["contextId"] = context_id
    return {"task": task}


def task_status(state: str, text: str | None = None, message_id: str | None = None) -> JSON:
    out: JSON = {"state": "TASK_STATE_" + state.upper().replace("-", "_")}
    if text is not None:
        out["message"] = {
            "messageId": message_id or text,
            "role": "ROLE_AGENT",
            "parts": [{"text": text}],
        }
    return out


class Scripted:
    """A 1.0 agent: starts, follow-ups and cancels each answered by a function of the request.

    Each function returns the JSON-RPC ``result`` object, or bytes sent as the whole body.
    """

    def __init__(
        self,
        start: Callable[[JSON], Any] | None = None,
        follow_up: Callable[[JSON], Any] | None = None,
        cancel: Callable[[JSON], Any] | None = None,
    ) -> None:
        self.start = start or (lambda r: task_v10("T1", "input-required"))
        self.follow_up = follow_up or (lambda r: task_v10("T1", "completed"))
        self.cancel = cancel or (lambda r: task_v10(r["params"]["id"], "canceled"))
        self.sent: list[bytes] = []

    async def __call__(self, request: JSON) -> Any:
        if request["method"] in ("CancelTask", "tasks/cancel"):
            answer = self.cancel(request)
        elif "taskId" in request["params"]["message"]:
            answer = self.follow_up(request)
        else:
            answer = self.start(request)
        raw = (
            answer
            if isinstance(answer, bytes)
            else msgspec.json.encode(rpc_result(request, answer))
        )
        self.sent.append(raw)
        return raw


# How the weather fake answers a first turn whose text is one of these words.
FIRST_TURN = {"auth": "auth-required", "now": "completed", "fail": "failed"}


TERMINAL = {"completed", "canceled", "failed", "rejected"}


class WeatherFake:
    """Behaves as the SDK test agent does, in one protocol version, without the SDK."""

    def __init__(self, version: str, with_context: bool = True) -> None:
        self.version = version
        self.with_context = with_context
        self.tasks: dict[str, JSON] = {}

    async def __call__(self, request: JSON) -> JSON:
        if request["method"] in ("CancelTask", "tasks/cancel"):
            task = self.tasks[request["params"]["id"]]
            task["state"] = "canceled"
            rendered = self.render(task)
            return rpc_result(request, rendered.get("task", rendered))
        message = request["params"]["message"]
        text = " ".join(p["text"] for p in message["parts"] if "text" in p)
        task_id = message.get("taskId")
        if task_id is None:
            context = str(uuid.uuid4()) if self.with_context else None
            task = {"id": str(uuid.uuid4()), "contextId": context, "artifacts": []}
            task["state"] = FIRST_TURN.get(text, "input-required")
            self.tasks[task["id"]] = task
        elif task_id not in self.tasks:
            return rpc_error(request, -32001, f"Task {task_id} not found")
        elif self.tasks[task_id]["state"] in TERMINAL:
            code = -32004 if self.version == "1.0" else -32602
            return rpc_error(request, code, f"Task {task_id} is in a terminal state")
        else:
            task = self.tasks[task_id]
            task["state"] = "completed"
            task["artifacts"].append(f"Sunny in {text}")
        return rpc_result(request, self.render(task))

    def render(self, task: JSON) -> JSON:
        return task_body(
            self.version, task["id"], task["state"], task["contextId"], task["artifacts"]
        )


class HeldAgent:
    """A 1.0 agent that asks for a city and holds its answer to the first follow-up."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.follow_ups = 0

    async def __call__(self, request: JSON) -> JSON:
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
        self.follow_ups += 1
        if self.follow_ups == 1:
            self.arrived.set()
            await self.release.wait()
        return rpc_result(request, task_body("1.0", "T1", "completed", "C1"))


class Flaky:
    """A 1.0 agent that asks for a city, then answers follow-ups as ``mode`` says."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.release = asyncio.Event()

    async def __call__(self, request: JSON) -> Any:
        if "taskId" not in request["params"]["message"]:
            return rpc_result(request, task_body("1.0", "T1", "input-required", "C1"))
        if self.mode == "http-500":
            return web.Response(status=500, text="boom")
        if self.mode == "not-json":
            return web.Response(body=b"<html>oops</html>", content_type="text/html")
        if self.mode == "hold":
            await self.release.wait()
        return rpc_result(request, task_body("1.0", "T1", "completed", "C1", ["Sunny"]))
