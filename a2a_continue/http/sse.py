"""Server-sent event responses: the relayed agent stream and the live event stream."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from a2a_continue.core.callers import Caller
from a2a_continue.core.event_stream import EventStream, start_after, until_states
from a2a_continue.core.models import encode
from a2a_continue.core.relay import Relay
from a2a_continue.errors import AppError
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.open_streams import OpenStream

log = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"


def wants_stream(request: Request) -> bool:
    """Tell whether the caller asked for `text/event-stream`."""
    return EVENT_STREAM in request.headers.get("accept", "")


def keep_alive() -> ServerSentEvent:
    """The comment line sent while a stream is quiet."""
    return ServerSentEvent(comment="keep-alive")


class StreamResponse(EventSourceResponse):
    """An SSE response that gives its open stream back however it ends."""

    def __init__(
        self,
        content: AsyncIterator[ServerSentEvent],
        opened: OpenStream,
        gw: Gateway,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            content, headers=headers, ping=gw.settings.keepalive_s, ping_message_factory=keep_alive
        )
        self.opened = opened

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.opened.release()


async def relay_response(gw: Gateway, opening: Callable[[], Awaitable[Relay]]) -> StreamResponse:
    """Answer with the agent's frames as they come (refusals before the stream are raised)."""
    opened = gw.open_streams.take()
    try:
        relay = await opening()
    except BaseException:
        opened.release()
        raise

    async def events() -> AsyncIterator[ServerSentEvent]:
        async for item in relay.items():
            yield ServerSentEvent(data=item.data.decode(), event=item.event)

    headers = {"A2A-Task-State": relay.state} if relay.state else {}
    return StreamResponse(events(), opened, gw, headers=headers)


async def event_stream_response(
    request: Request, gw: Gateway, caller: Caller, agent_id: uuid.UUID, task_id: str
) -> StreamResponse:
    """Answer with a task's events, replayed then live (404 before any stream)."""
    after = start_after(request.headers, request.query_params)
    until = until_states(request.query_params)
    opened = gw.open_streams.take()
    try:
        stream = await EventStream(gw, caller, agent_id, task_id, after, until).open()
    except BaseException:
        opened.release()
        raise

    async def events() -> AsyncIterator[ServerSentEvent]:
        try:
            async for event in stream.events():
                data = encode(event).decode()
                yield ServerSentEvent(data=data, event=event.type, id=str(event.seq))
        except AppError as error:
            # The response has started: end the stream; the client resumes with Last-Event-ID.
            log.warning("event stream of task %s ended: %s", task_id, error.detail)
        except Exception:
            log.exception("event stream of task %s failed", task_id)

    return StreamResponse(events(), opened, gw)
