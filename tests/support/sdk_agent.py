"""A real A2A agent built with the official a2a-sdk, served by uvicorn for interop tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import to_compat_agent_card
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import UnsupportedOperationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as AsgiMessage

from tests.support.servers import serve_asgi
from tests.support.signed_cards import CardSigning

_TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
    }
)


@dataclass
class SdkAgent:
    """Handle on a running SDK agent and what it has received."""

    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    # The body of each answer, as sent (a stream's events included).
    answers: list[bytes] = field(default_factory=list)
    # A "slow" first turn works until this is set (or SLOW_S passes), then asks for input.
    proceed: asyncio.Event = field(default_factory=asyncio.Event)
    # What a pushing agent's task does next (see PushingExecutor).
    steps: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    # The push configs the agent keeps (an agent with ``push="store"``).
    push_store: InMemoryPushNotificationConfigStore | None = None


SLOW_S = 10.0


class WeatherExecutor(AgentExecutor):
    """Ask for a city, then answer with a forecast; keywords pick other first-turn outcomes."""

    def __init__(self, proceed: asyncio.Event | None = None) -> None:
        self.proceed = proceed or asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Start a task or finish an interrupted one."""
        assert context.message is not None
        text = context.get_user_input()
        if context.current_task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            await self._first_turn(TaskUpdater(event_queue, task.id, task.context_id), text)
            return
        task = context.current_task
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.add_artifact([new_text_part(f"Sunny in {text}")], name="forecast")
        await updater.complete()

    async def _first_turn(self, updater: TaskUpdater, text: str) -> None:
        if text == "auth":
            await updater.requires_auth(
                updater.new_agent_message([new_text_part("Please sign in")])
            )
        elif text == "now":
            await updater.add_artifact([new_text_part("Sunny now")], name="forecast")
            await updater.complete()
        elif text == "fail":
            await updater.failed()
        elif text == "slow":
            await updater.start_work()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proceed.wait(), SLOW_S)
            await updater.requires_input(updater.new_agent_message([new_text_part("Which city?")]))
        else:
            await updater.requires_input(updater.new_agent_message([new_text_part("Which city?")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task canceled."""
        assert context.task_id is not None and context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.update_status(TaskState.TASK_STATE_CANCELED)


class StreamingWeatherExecutor(AgentExecutor):
    """Report its work as it goes: working, a draft in two chunks, then ask for a city;
    on the follow-up, stream the forecast and complete. Text `slow` pauses before asking."""

    def __init__(self, pause_s: float = 0.0, proceed: asyncio.Event | None = None) -> None:
        self.pause_s = pause_s
        self.proceed = proceed or asyncio.Event()

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proceed.wait(), self.pause_s)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Start a task or finish an interrupted one, one event at a time."""
        assert context.message is not None
        text = context.get_user_input()
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if context.current_task is None:
            await updater.add_artifact([new_text_part("Looking ")], "draft", "draft")
            await updater.add_artifact(
                [new_text_part("for a city")], "draft", "draft", append=True, last_chunk=True
            )
            if text == "slow":
                await self._pause()
            await updater.requires_input(updater.new_agent_message([new_text_part("Which city?")]))
            return
        if text == "slow":
            await self._pause()
        await updater.add_artifact([new_text_part(f"Sunny in {text}")], "forecast", "forecast")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task canceled."""
        assert context.task_id is not None and context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.update_status(TaskState.TASK_STATE_CANCELED)


class PushingExecutor(AgentExecutor):
    """Start working, then do each step the test queues: `done` completes the task with an
    artifact, `ask` asks for input, `art <text>` adds an artifact, any other text is a new
    working status with that text. Each change is pushed to the task's push configs."""

    def __init__(self, steps: asyncio.Queue[str]) -> None:
        self.steps = steps

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Work step by step as the test says."""
        assert context.message is not None
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        while True:
            step = await self.steps.get()
            if step == "done":
                await updater.add_artifact([new_text_part("Sunny")], "forecast", "forecast")
                await updater.complete()
                return
            if step == "ask":
                await updater.requires_input(updater.new_agent_message([new_text_part("City?")]))
                return
            if step.startswith("art "):
                await updater.add_artifact([new_text_part(step[4:])], step[4:], step[4:])
                continue
            await updater.update_status(
                TaskState.TASK_STATE_WORKING, updater.new_agent_message([new_text_part(step)])
            )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task canceled."""
        assert context.task_id is not None and context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.update_status(TaskState.TASK_STATE_CANCELED)


class _Handler(DefaultRequestHandler):
    """The SDK handler, refusing messages to terminal tasks before it builds an ActiveTask.

    a2a-sdk 1.3 builds an ActiveTask (and its EventQueueSource dispatcher tasks) before it sees
    the task is terminal, then drops it without closing the queues; the orphaned asyncio tasks
    are later garbage-collected while pending and log "Task was destroyed but it is pending!".
    Raising the same error first gives the same JSON-RPC answer without the leak.
    """

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        task_id = params.message.task_id
        task = await self.task_store.get(task_id, context) if task_id else None
        if isinstance(task, Task) and task.status.state in _TERMINAL:
            state = TaskState.Name(task.status.state)
            raise UnsupportedOperationError(message=f"Task {task_id} is in terminal state: {state}")
        result: Message | Task = await super().on_message_send(params, context)
        return result


class _Recorder:
    """Pure-ASGI middleware that records each request body and its headers before the SDK."""

    def __init__(self, app: ASGIApp, agent: SdkAgent) -> None:
        self.app = app
        self.agent = agent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with contextlib.suppress(ValueError):
            self.agent.received.append(json.loads(body))
            self.agent.headers.append(headers)
        replayed = False

        async def replay() -> AsgiMessage:
            nonlocal replayed
            if replayed:
                return await receive()  # blocks until disconnect, as the server would
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        index = len(self.agent.answers)
        self.agent.answers.append(b"")

        async def record(message: AsgiMessage) -> None:
            if message["type"] == "http.response.body":
                self.agent.answers[index] += message.get("body", b"")
            await send(message)

        await self.app(scope, replay, record)


def _card(
    url: str, streaming: bool = False, extended: bool = False, push: bool = False
) -> AgentCard:
    return AgentCard(
        name="SDK weather agent",
        description="Asks for a city, then gives a forecast.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(
            streaming=streaming, push_notifications=push, extended_agent_card=extended
        ),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="forecast",
                name="Forecast",
                description="Gives the weather for a city.",
                tags=["weather"],
                examples=["Paris"],
            )
        ],
    )


def _card_routes(
    agent: SdkAgent,
    version: str,
    streaming: bool,
    signing: CardSigning | None = None,
    extended: bool = False,
) -> list[Route]:
    """The SDK's own card route, naming one JSON-RPC interface of ``version`` at the agent.

    A 0.3 card is served as an a2a-sdk 0.3 agent publishes it (``url``, ``preferredTransport``),
    converted from the 1.0 card by the SDK's compat layer. With ``signing``, a 1.0 card is
    signed by the SDK's signer and the agent's JWK set is served beside it.
    """

    def card() -> AgentCard:
        served = _card(agent.url, streaming, extended)
        served.supported_interfaces[0].protocol_version = version
        return served

    if version == "1.0":

        async def modify(_: AgentCard) -> AgentCard:
            return card() if signing is None else signing.apply(agent.url, card())

        routes = create_agent_card_routes(_card("http://127.0.0.1/"), card_modifier=modify)
        return routes if signing is None else [*routes, signing.jwks_route()]

    async def card_v03(_: Request) -> JSONResponse:
        return JSONResponse(to_compat_agent_card(card()).model_dump(mode="json", exclude_none=True))

    return [Route(AGENT_CARD_WELL_KNOWN_PATH, card_v03, methods=["GET"])]


@contextlib.asynccontextmanager
async def run_sdk_agent(
    streaming: bool = False,
    pause_s: float = 0.0,
    card: str | None = None,
    signing: CardSigning | None = None,
    extended: bool = False,
    push: str | None = None,
) -> AsyncIterator[SdkAgent]:
    """Serve the SDK agent on a free local port in the running loop for the block's duration.

    ``streaming`` serves the streaming executor with a card that says so (``pause_s`` is its
    pause on the text `slow`); ``card`` ("1.0" or "0.3") also serves its agent card in that
    version's shape, signed as ``signing`` says; ``extended`` declares an extended card too
    (the SDK's GetExtendedAgentCard, signed the same way). ``push`` serves the step-by-step
    ``PushingExecutor``: ``"store"`` keeps push configs and pushes (the SDK's in-memory store
    and sender), ``"refuse"`` has none (and its card says so).
    """
    agent = SdkAgent(url="")
    executor: AgentExecutor = (
        PushingExecutor(agent.steps)
        if push is not None
        else StreamingWeatherExecutor(pause_s, agent.proceed)
        if streaming
        else WeatherExecutor(agent.proceed)
    )
    pushing = push == "store"
    sender_client = httpx.AsyncClient(timeout=10.0)
    agent.push_store = InMemoryPushNotificationConfigStore() if pushing else None
    sender = (
        BasePushNotificationSender(sender_client, agent.push_store)
        if agent.push_store is not None
        else None
    )

    async def extended_card(served: AgentCard, _: ServerCallContext) -> AgentCard:
        served = _card(agent.url, streaming, extended=True)
        served.name = "SDK weather agent (extended)"
        return served if signing is None else signing.apply(agent.url, served)

    handler = _Handler(
        agent_executor=executor,
        task_store=InMemoryTaskStore(),
        agent_card=_card("http://127.0.0.1/", streaming, extended, pushing),
        push_config_store=agent.push_store,
        push_sender=sender,
        extended_agent_card=_card("http://127.0.0.1/", streaming, True) if extended else None,
        extended_card_modifier=extended_card if extended else None,
    )
    routes = create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)
    if card is not None:
        routes = [*_card_routes(agent, card, streaming, signing, extended), *routes]
    app = Starlette(routes=routes)
    try:
        async with serve_asgi(_Recorder(app, agent), lifespan="off") as base:
            agent.url = base + "/"
            yield agent
    finally:
        await handler.aclose()
        await sender_client.aclose()
