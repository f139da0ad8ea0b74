"""An a2a-sdk 0.3 agent that pushes (its in-memory push config store and sender), for the
push-in tests: run with the 0.3 venv's python; it prints `PORT <n>` once it listens on
127.0.0.1.

Its task starts working, then does each step the test posts to `/control/step` (`done`
completes it with an artifact, `art <id>` adds an artifact, any other text is a new working
status with that text); `/control/received` lists the JSON-RPC methods it was called with.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from typing import Any

import httpx
import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types import AgentCapabilities, AgentCard, Part, TaskState, TextPart
from a2a.utils import new_agent_text_message, new_task
from starlette.requests import Request
from starlette.responses import JSONResponse

STEPS: asyncio.Queue[str] = asyncio.Queue()
METHODS: list[str] = []


class Pushing(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        while True:
            step = await STEPS.get()
            if step == "done":
                await updater.add_artifact([Part(root=TextPart(text="Sunny"))], "forecast")
                await updater.complete()
                return
            if step.startswith("art "):
                await updater.add_artifact([Part(root=TextPart(text=step[4:]))], step[4:])
                continue
            message = new_agent_text_message(step, task.context_id, task.id)
            await updater.update_status(TaskState.working, message)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Recorder:
    """Note each JSON-RPC method before the SDK sees it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/":
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        with contextlib.suppress(ValueError):
            METHODS.append(str(json.loads(body).get("method")))
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def step(request: Request) -> JSONResponse:
    STEPS.put_nowait((await request.body()).decode())
    return JSONResponse({"ok": True})


async def received(_: Request) -> JSONResponse:
    return JSONResponse(METHODS)


async def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="SDK 0.3 pushing agent",
        description="Works step by step and pushes each change.",
        url=url,
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=False, push_notifications=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[],
    )
    client = httpx.AsyncClient(timeout=10.0)
    store = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=Pushing(),
        task_store=InMemoryTaskStore(),
        push_config_store=store,
        push_sender=BasePushNotificationSender(client, store),
    )
    app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    app.add_route("/control/step", step, methods=["POST"])
    app.add_route("/control/received", received, methods=["GET"])
    server = uvicorn.Server(uvicorn.Config(Recorder(app), log_level="warning", lifespan="off"))
    print(f"PORT {port}", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
