"""A tiny weather agent speaking A2A 0.3 and 1.0 JSON-RPC, with its agent card.

Used by `a2a-continue demo` and served alone by `a2a-continue sample-agent`. It asks which
city, then gives its forecast. Each turn leaves the task `working` for ``slow_s`` seconds
(`--slow`; none by default) before it asks or completes: a blocking send waits that long, one
with `returnImmediately` (0.3: `blocking: false`) is answered `working` at once, and
`GetTask` / `SubscribeToTask` show the task going on.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import sys
import uuid
from collections.abc import AsyncGenerator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from a2a_continue.ops.sample_card import CARD_PATH, sample_card
from a2a_continue.ops.sample_tasks import (
    TERMINAL,
    Task,
    cancel,
    go_on,
    render,
    settled,
    text_part,
    work,
)

JSON = dict[str, Any]

_METHODS = {
    "SendMessage": ("1.0", "send"),
    "GetTask": ("1.0", "get"),
    "CancelTask": ("1.0", "cancel"),
    "message/send": ("0.3", "send"),
    "tasks/get": ("0.3", "get"),
    "tasks/cancel": ("0.3", "cancel"),
}
_STREAM_METHODS = {
    "SendStreamingMessage": ("1.0", "send"),
    "SubscribeToTask": ("1.0", "subscribe"),
    "message/stream": ("0.3", "send"),
    "tasks/resubscribe": ("0.3", "subscribe"),
}
_ENCODER = msgspec.json.Encoder()


@dataclass
class _Agent:
    tasks: dict[str, Task]
    slow_s: float


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_AGENT = web.AppKey("agent", _Agent)


def _known(tasks: dict[str, Task], task_id: object) -> Task:
    task = tasks.get(task_id) if isinstance(task_id, str) else None
    if task is None:
        raise _RpcError(-32001, "Task not found")
    go_on(task)
    return task


def _user_text(message: JSON) -> str:
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise _RpcError(-32602, "Invalid params: message.parts must be a list")
    return " ".join(str(p["text"]) for p in parts if isinstance(p, dict) and "text" in p).strip()


def _params(request: Any) -> JSON:
    params = request.get("params")
    if not isinstance(params, dict):
        raise _RpcError(-32602, "Invalid params: params must be an object")
    return params


def _message_of(params: JSON) -> JSON:
    message = params.get("message")
    if not isinstance(message, dict):
        raise _RpcError(-32602, "Invalid params: message is required")
    return message


def _take_turn(agent: _Agent, version: str, message: JSON) -> Task:
    """Start a task, or give a task that asked its city; either way it starts working."""
    text = _user_text(message)
    task_id = message.get("taskId")
    if not task_id:
        task = Task(id=str(uuid.uuid4()), context_id=str(message.get("contextId") or uuid.uuid4()))
        agent.tasks[task.id] = task
        work(task, agent.slow_s, None)
        return task
    task = _known(agent.tasks, str(task_id))
    if task.state in TERMINAL:
        # 0.3 agents commonly answer a message to a finished task with invalid params.
        code = -32004 if version == "1.0" else -32602
        raise _RpcError(code, f"Task {task_id} is in terminal state: {task.state}")
    if task.state == "working":
        raise _RpcError(-32602, f"Invalid params: task {task_id} is still working")
    work(task, agent.slow_s, text)
    return task


def _returns_immediately(version: str, params: JSON) -> bool:
    config = params.get("configuration")
    if not isinstance(config, dict):
        return False
    if version == "1.0":
        return config.get("returnImmediately") is True
    return config.get("blocking") is False


async def _send(agent: _Agent, version: str, params: JSON) -> JSON:
    task = _take_turn(agent, version, _message_of(params))
    if _returns_immediately(version, params):
        go_on(task)  # a quick agent has its answer already
    else:
        await settled(task)
    rendered = render(task, version)
    return {"task": rendered} if version == "1.0" else rendered


def _cancel(agent: _Agent, version: str, params: JSON) -> JSON:
    task = _known(agent.tasks, params.get("id"))
    if task.state in TERMINAL:
        raise _RpcError(-32002, "Task cannot be canceled")
    cancel(task)
    return render(task, version)


async def _dispatch(agent: _Agent, request: Any) -> JSON:
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        raise _RpcError(-32600, "Invalid Request")
    route = _METHODS.get(request["method"])
    if route is None:
        raise _RpcError(-32601, "Method not found")
    params = _params(request)
    version, operation = route
    if operation == "send":
        return await _send(agent, version, params)
    if operation == "get":
        return render(_known(agent.tasks, params.get("id")), version)
    return _cancel(agent, version, params)


def _answer(request_id: object, outcome: JSON | _RpcError) -> web.Response:
    body: JSON = {"jsonrpc": "2.0", "id": request_id}
    if isinstance(outcome, _RpcError):
        body["error"] = {"code": outcome.code, "message": outcome.message}
    else:
        body["result"] = outcome
    return web.Response(body=_ENCODER.encode(body), content_type="application/json")


# ---- streams --------------------------------------------------------------------------------


def _task_frame(task: Task, version: str) -> JSON:
    rendered = render(task, version)
    return {"task": rendered} if version == "1.0" else rendered


def _status_frame(task: Task, version: str, final: bool) -> JSON:
    rendered = render(task, version)
    event: JSON = {"taskId": task.id, "contextId": task.context_id, "status": rendered["status"]}
    if version == "1.0":
        return {"statusUpdate": event}
    return {"kind": "status-update", **event, "final": final}


def _artifact_frame(task: Task, version: str, text: str, append: bool, last: bool) -> JSON:
    artifact = {"artifactId": task.artifacts[-1][0], "name": "forecast"}
    event: JSON = {
        "taskId": task.id,
        "contextId": task.context_id,
        "artifact": {**artifact, "parts": [text_part(version, text)]},
        "append": append,
        "lastChunk": last,
    }
    return {"artifactUpdate": event} if version == "1.0" else {"kind": "artifact-update", **event}


def _outcome(task: Task, version: str, chunks: list[str]) -> list[JSON]:
    """The frames of a turn's end: the forecast (in ``chunks`` of its text) and the status."""
    frames = []
    if task.state == "completed":
        for i, text in enumerate(chunks):
            last = i == len(chunks) - 1
            frames.append(_artifact_frame(task, version, text, append=i > 0, last=last))
    return [*frames, _status_frame(task, version, True)]


async def _turn_frames(task: Task, version: str, first: bool) -> AsyncGenerator[JSON, None]:
    """A streamed send: the task working, then (after its turn) the question or the forecast
    in two chunks."""
    yield _task_frame(task, version) if first else _status_frame(task, version, False)
    await settled(task)
    for frame in _outcome(task, version, ["Sunny", f" in {task.city}"]):
        yield frame


async def _subscription(task: Task, version: str) -> AsyncGenerator[JSON, None]:
    """A subscription: the task as it stands, then the end of the turn it works on, if any."""
    yield _task_frame(task, version)
    if task.state == "working":
        await settled(task)
        for frame in _outcome(task, version, [f"Sunny in {task.city}"]):
            yield frame


def _frames(
    agent: _Agent, version: str, operation: str, params: JSON
) -> AsyncGenerator[JSON, None]:
    """Check a stream request and act on it now (errors come before any frame)."""
    if operation == "subscribe":
        task = _known(agent.tasks, params.get("id"))
        if task.state in TERMINAL:
            raise _RpcError(-32004, f"Task {task.id} is in terminal state: {task.state}")
        return _subscription(task, version)
    message = _message_of(params)
    task = _take_turn(agent, version, message)
    return _turn_frames(task, version, first=not message.get("taskId"))


async def _stream(request: web.Request, payload: JSON, version: str, operation: str) -> Any:
    request_id = payload.get("id")
    try:
        frames = _frames(request.app[_AGENT], version, operation, _params(payload))
    except _RpcError as error:
        return _answer(request_id, error)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    # A caller may close the stream once it has seen the last status: that is not an error.
    with contextlib.suppress(ConnectionError):
        async with contextlib.aclosing(frames):
            async for result in frames:
                body = {"jsonrpc": "2.0", "id": request_id, "result": result}
                await response.write(b"data: " + _ENCODER.encode(body) + b"\n\n")
                await asyncio.sleep(0.05)  # a real agent takes its time; callers see frames
        await response.write_eof()
    return response


async def _handle(request: web.Request) -> web.StreamResponse:
    try:
        payload: Any = msgspec.json.decode(await request.read())
    except msgspec.DecodeError:
        return _answer(None, _RpcError(-32700, "Parse error"))
    request_id = payload.get("id") if isinstance(payload, dict) else None
    if isinstance(payload, dict) and payload.get("method") in _STREAM_METHODS:
        stream: web.StreamResponse = await _stream(
            request, payload, *_STREAM_METHODS[payload["method"]]
        )
        return stream
    try:
        return _answer(request_id, await _dispatch(request.app[_AGENT], payload))
    except _RpcError as error:
        return _answer(request_id, error)


_PROTOCOL = web.AppKey("protocol", str)


async def _card(request: web.Request) -> web.Response:
    # The endpoint is named as the caller reached the card, so it works behind any host name.
    endpoint = str(request.url.with_path("/").with_query(None))
    card = sample_card(endpoint, request.app[_PROTOCOL])
    return web.Response(body=_ENCODER.encode(card), content_type="application/json")


def create_sample_agent(protocol: str = "1.0", slow_s: float = 0.0) -> web.Application:
    """Build the sample agent's aiohttp application with an empty task table."""
    if protocol not in ("1.0", "0.3"):
        raise ValueError(f"protocol must be '1.0' or '0.3', not {protocol!r}")
    if not (math.isfinite(slow_s) and slow_s >= 0):
        raise ValueError(f"slow_s must be a number of seconds >= 0, not {slow_s!r}")
    app = web.Application()
    app[_AGENT] = _Agent(tasks={}, slow_s=slow_s)
    app[_PROTOCOL] = protocol
    app.router.add_post("/", _handle)
    app.router.add_get(CARD_PATH, _card)
    return app


async def start_sample_agent(
    host: str = "127.0.0.1", port: int = 0, protocol: str = "1.0", slow_s: float = 0.0
) -> tuple[web.AppRunner, str]:
    """Serve the sample agent on host:port (0 picks a free port); return runner and endpoint."""
    runner = web.AppRunner(create_sample_agent(protocol, slow_s), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_port = runner.addresses[0][1]
    shown_host = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown_host}:{bound_port}/"


async def _serve_until_stopped(host: str, port: int, protocol: str, slow_s: float) -> None:
    runner, endpoint = await start_sample_agent(host, port, protocol, slow_s)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    print(f"sample agent (A2A {protocol}) serving on {endpoint}", flush=True)
    print(f"its card: {endpoint.rstrip('/')}{CARD_PATH}", flush=True)
    if slow_s:
        print(f"each turn works for {slow_s:g} s before it asks or answers", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run_sample_agent(
    host: str = "127.0.0.1", port: int = 9999, protocol: str = "1.0", slow_s: float = 0.0
) -> int:
    """Serve the sample agent until SIGINT or SIGTERM; one line and exit 1 if it cannot listen."""
    if not (math.isfinite(slow_s) and slow_s >= 0):
        print(f"sample agent: --slow must be seconds >= 0, not {slow_s:g}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve_until_stopped(host, port, protocol, slow_s))
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"sample agent: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        return 1
    return 0
