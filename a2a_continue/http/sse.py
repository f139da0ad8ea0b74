"""Server-sent event responses: the relayed agent stream and the live event stream."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from a2a_continue.core.access.callers import Caller
from a2a_continue.core.shapes.wire import encode
from a2a_continue.core.tasks.event_stream import EventStream, start_after, until_states
from a2a_continue.core.turns.relay import Relay
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


# What sse-starlette sends with a stream, so both kinds of stream answer alike.
LIVE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
KEEP_ALIVE = keep_alive().encode()


class LiveStreamResponse(Response):
    """The live event stream of a task, lean: thousands of these idle in one process.

    Besides the request's own task there is one per stream, waiting for the client to go;
    the keep-alive is the stream's wait timing out; the server's stop ends every stream
    (OpenStreams). The frames are sse-starlette's, byte for byte.
    """

    def __init__(self, stream: EventStream, opened: OpenStream, gw: Gateway, task_id: str):
        self.status_code = 200
        self.background = None
        self.raw_headers = list(LIVE_HEADERS)
        self.stream, self.opened, self.gw, self.task_id = stream, opened, gw, task_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = self.stream
        gone = asyncio.ensure_future(_until_disconnected(receive, stream))
        stop = self.gw.open_streams.follow(stream.stop)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            try:
                async for event in stream.follow(self.gw.settings.keepalive_s):
                    if event is None:
                        frame = KEEP_ALIVE
                    else:
                        data = encode(event).decode()
                        sse = ServerSentEvent(data=data, event=event.type, id=str(event.seq))
                        frame = sse.encode()
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
            except AppError as error:
                # The response has started: end it; the client resumes with Last-Event-ID.
                log.warning("event stream of task %s ended: %s", self.task_id, error.detail)
            except OSError:
                raise
            except Exception:
                log.exception("event stream of task %s failed", self.task_id)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            gone.cancel()
            self.gw.open_streams.unfollow(stop)
            self.opened.release()


async def _until_disconnected(receive: Receive, stream: EventStream) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    stream.stop()


async def event_stream_response(
    request: Request, gw: Gateway, caller: Caller, agent_id: uuid.UUID, task_id: str
) -> LiveStreamResponse:
    """Answer with a task's events, replayed then live (404 before any stream)."""
    after = start_after(request.headers, request.query_params)
    until = until_states(request.query_params)
    opened = gw.open_streams.take()
    try:
        stream = await EventStream(gw, caller, agent_id, task_id, after, until).open()
    except BaseException:
        opened.release()
        raise
    return LiveStreamResponse(stream, opened, gw, task_id)
