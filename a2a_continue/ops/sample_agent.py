"""A tiny weather agent speaking A2A 0.3 and 1.0 JSON-RPC, with its agent card.

Used by `a2a-continue demo` and served alone by `a2a-continue sample-agent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web

JSON = dict[str, Any]

_TERMINAL = frozenset({"completed", "canceled", "failed", "rejected"})
_METHODS = {
    "SendMessage": ("1.0", "send"),
    "CancelTask": ("1.0", "cancel"),
    "message/send": ("0.3", "send"),
    "tasks/cancel": ("0.3", "cancel"),
}
_STREAM_METHODS = {"SendStreamingMessage": "1.0", "message/stream": "0.3"}
_ENCODER = msgspec.json.Encoder()


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class _Task:
    id: str
    context_id: str
    state: str = "input-required"
    question: str | None = "Which city?"
    artifacts: list[tuple[str, str]] = field(default_factory=list)  # (artifactId, text)
    updated: str = field(default_factory=_now)


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_TASKS = web.AppKey("tasks", dict[str, _Task])


def _text_part(version: str, text: str) -> JSON:
    return {"text": text} if version == "1.0" else {"kind": "text", "text": text}


def _state_name(version: str, state: str) -> str:
    return "TASK_STATE_" + state.upper().replace("-", "_") if version == "1.0" else state


def _render(task: _Task, version: str) -> JSON:
    status: JSON = {"state": _state_name(version, task.state), "timestamp": task.updated}
    if task.question is not None:
        message: JSON = {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_AGENT" if version == "1.0" else "agent",
            "taskId": task.id,
            "contextId": task.context_id,
            "parts": [_text_part(version, task.question)],
        }
        status["message"] = message if version == "1.0" else {"kind": "message", **message}
    body: JSON = {"id": task.id, "contextId": task.context_id, "status": status}
    if task.artifacts:
        body["artifacts"] = [
            {"artifactId": aid, "name": "forecast", "parts": [_text_part(version, text)]}
            for aid, text in task.artifacts
        ]
    return body if version == "1.0" else {"kind": "task", **body}


def _user_text(message: JSON) -> str:
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise _RpcError(-32602, "Invalid params: message.parts must be a list")
    return " ".join(str(p["text"]) for p in parts if isinstance(p, dict) and "text" in p).strip()


def _send(tasks: dict[str, _Task], version: str, params: JSON) -> JSON:
    message = params.get("message")
    if not isinstance(message, dict):
        raise _RpcError(-32602, "Invalid params: message is required")
    text = _user_text(message)
    task_id = message.get("taskId")
    if not task_id:
        context_id = message.get("contextId") or str(uuid.uuid4())
        task = _Task(id=str(uuid.uuid4()), context_id=str(context_id))
        tasks[task.id] = task
    else:
        task = _continue(tasks, version, str(task_id), text)
    rendered = _render(task, version)
    return {"task": rendered} if version == "1.0" else rendered


def _continue(tasks: dict[str, _Task], version: str, task_id: str, city: str) -> _Task:
    task = tasks.get(task_id)
    if task is None:
        raise _RpcError(-32001, "Task not found")
    if task.state in _TERMINAL:
        # 0.3 agents commonly answer a message to a finished task with invalid params.
        code = -32004 if version == "1.0" else -32602
        raise _RpcError(code, f"Task {task_id} is in terminal state: {task.state}")
    task.artifacts.append((str(uuid.uuid4()), f"Sunny in {city}"))
    task.state, task.question, task.updated = "completed", None, _now()
    return task


def _cancel(tasks: dict[str, _Task], version: str, params: JSON) -> JSON:
    task_id = params.get("id")
    if not isinstance(task_id, str):
        raise _RpcError(-32602, "Invalid params: id is required")
    task = tasks.get(task_id)
    if task is None:
        raise _RpcError(-32001, "Task not found")
    if task.state in _TERMINAL:
        raise _RpcError(-32002, "Task cannot be canceled")
    task.state, task.question, task.updated = "canceled", None, _now()
    return _render(task, version)


def _dispatch(tasks: dict[str, _Task], request: Any) -> JSON:
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        raise _RpcError(-32600, "Invalid Request")
    route = _METHODS.get(request["method"])
    if route is None:
        raise _RpcError(-32601, "Method not found")
    params = request.get("params")
    if not isinstance(params, dict):
        raise _RpcError(-32602, "Invalid params: params must be an object")
    version, operation = route
    if operation == "send":
        return _send(tasks, version, params)
    return _cancel(tasks, version, params)


def _answer(request_id: object, outcome: JSON | _RpcError) -> web.Response:
    body: JSON = {"jsonrpc": "2.0", "id": request_id}
    if isinstance(outcome, _RpcError):
        body["error"] = {"code": outcome.code, "message": outcome.message}
    else:
        body["result"] = outcome
    return web.Response(body=_ENCODER.encode(body), content_type="application/json")


def _status_frame(task: _Task, version: str, final: bool) -> JSON:
    rendered = _render(task, version)
    event: JSON = {"taskId": task.id, "contextId": task.context_id, "status": rendered["status"]}
    if version == "1.0":
        return {"statusUpdate": event}
    return {"kind": "status-update", **event, "final": final}


def _artifact_frame(task: _Task, version: str, text: str, append: bool, last: bool) -> JSON:
    artifact = {"artifactId": task.artifacts[-1][0], "name": "forecast"}
    event: JSON = {
        "taskId": task.id,
        "contextId": task.context_id,
        "artifact": {**artifact, "parts": [_text_part(version, text)]},
        "append": append,
        "lastChunk": last,
    }
    return {"artifactUpdate": event} if version == "1.0" else {"kind": "artifact-update", **event}


def _stream_frames(tasks: dict[str, _Task], version: str, params: JSON) -> list[JSON]:
    """The frames of a streamed send: the first turn asks for a city; the next one streams the
    forecast in two chunks and completes."""
    message = params.get("message")
    if not isinstance(message, dict):
        raise _RpcError(-32602, "Invalid params: message is required")
    if not message.get("taskId"):
        task = _Task(id=str(uuid.uuid4()), context_id=str(message.get("contextId") or uuid.uuid4()))
        tasks[task.id] = task
        task.state, task.question = "working", None
        first = _render(task, version)
        task.state, task.question, task.updated = "input-required", "Which city?", _now()
        return [{"task": first} if version == "1.0" else first, _status_frame(task, version, True)]
    city = _user_text(message)
    task = _continue(tasks, version, str(message["taskId"]), city)
    done = _status_frame(task, version, True)
    task.state, task.question = "working", None
    working = _status_frame(task, version, False)
    task.state = "completed"
    return [
        working,
        _artifact_frame(task, version, "Sunny", append=False, last=False),
        _artifact_frame(task, version, f" in {city}", append=True, last=True),
        done,
    ]


async def _stream(request: web.Request, payload: JSON, version: str) -> web.StreamResponse:
    request_id = payload.get("id")
    params = payload.get("params")
    try:
        if not isinstance(params, dict):
            raise _RpcError(-32602, "Invalid params: params must be an object")
        frames = _stream_frames(request.app[_TASKS], version, params)
    except _RpcError as error:
        return _answer(request_id, error)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    # A caller may close the stream once it has seen the last status: that is not an error.
    with contextlib.suppress(ConnectionError):
        for result in frames:
            body = {"jsonrpc": "2.0", "id": request_id, "result": result}
            await response.write(b"data: " + _ENCODER.encode(body) + b"\n\n")
            await asyncio.sleep(0.05)  # a real agent takes its time; callers see frames arrive
        await response.write_eof()
    return response


async def _handle(request: web.Request) -> web.StreamResponse:
    try:
        payload: Any = msgspec.json.decode(await request.read())
    except msgspec.DecodeError:
        return _answer(None, _RpcError(-32700, "Parse error"))
    request_id = payload.get("id") if isinstance(payload, dict) else None
    if isinstance(payload, dict) and payload.get("method") in _STREAM_METHODS:
        return await _stream(request, payload, _STREAM_METHODS[payload["method"]])
    try:
        return _answer(request_id, _dispatch(request.app[_TASKS], payload))
    except _RpcError as error:
        return _answer(request_id, error)


CARD_PATH = "/.well-known/agent-card.json"
_PROTOCOL = web.AppKey("protocol", str)
_DESCRIPTION = "Asks which city, then gives that city's forecast."
_SKILL: JSON = {
    "id": "forecast",
    "name": "Forecast",
    "description": "Gives the weather for a city.",
    "tags": ["weather"],
    "examples": ["Paris"],
}


def sample_card(endpoint: str, protocol: str = "1.0") -> JSON:
    """The agent card for an agent answering at ``endpoint``, in the ``protocol`` card shape.

    A 1.0 card lists its JSON-RPC interfaces in ``supportedInterfaces`` (1.0 first; the agent
    also answers 0.3 methods); a 0.3 card names its endpoint in ``url`` with
    ``preferredTransport: JSONRPC``.
    """
    common: JSON = {
        "name": "Sample weather agent",
        "description": _DESCRIPTION,
        "version": "1.0.0",
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [_SKILL],
    }
    if protocol == "0.3":
        return {
            "protocolVersion": "0.3.0",
            **common,
            "url": endpoint,
            "preferredTransport": "JSONRPC",
        }
    interfaces = [
        {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": version}
        for version in ("1.0", "0.3")
    ]
    return {**common, "supportedInterfaces": interfaces}


async def _card(request: web.Request) -> web.Response:
    # The endpoint is named as the caller reached the card, so it works behind any host name.
    endpoint = str(request.url.with_path("/").with_query(None))
    card = sample_card(endpoint, request.app[_PROTOCOL])
    return web.Response(body=_ENCODER.encode(card), content_type="application/json")


def create_sample_agent(protocol: str = "1.0") -> web.Application:
    """Build the sample agent's aiohttp application with an empty task table."""
    if protocol not in ("1.0", "0.3"):
        raise ValueError(f"protocol must be '1.0' or '0.3', not {protocol!r}")
    app = web.Application()
    app[_TASKS] = {}
    app[_PROTOCOL] = protocol
    app.router.add_post("/", _handle)
    app.router.add_get(CARD_PATH, _card)
    return app


async def start_sample_agent(
    host: str = "127.0.0.1", port: int = 0, protocol: str = "1.0"
) -> tuple[web.AppRunner, str]:
    """Serve the sample agent on host:port (0 picks a free port); return runner and endpoint."""
    runner = web.AppRunner(create_sample_agent(protocol), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound_port = runner.addresses[0][1]
    shown_host = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown_host}:{bound_port}/"


async def _serve_until_stopped(host: str, port: int, protocol: str) -> None:
    runner, endpoint = await start_sample_agent(host, port, protocol)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    print(f"sample agent (A2A {protocol}) serving on {endpoint}", flush=True)
    print(f"its card: {endpoint.rstrip('/')}{CARD_PATH}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run_sample_agent(host: str = "127.0.0.1", port: int = 9999, protocol: str = "1.0") -> int:
    """Serve the sample agent until SIGINT or SIGTERM; one line and exit 1 if it cannot listen."""
    try:
        asyncio.run(_serve_until_stopped(host, port, protocol))
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"sample agent: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        return 1
    return 0
