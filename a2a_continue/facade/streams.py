"""Streaming JSON-RPC methods of the façade: frames in the client's version, as SSE events."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import msgspec
from starlette.responses import StreamingResponse

from a2a_continue import protocol
from a2a_continue.errors import AppError
from a2a_continue.facade import methods as m
from a2a_continue.facade import translate
from a2a_continue.facade.errors import INTERNAL_ERROR, RpcError, from_app_error

log = logging.getLogger(__name__)

SSE = "text/event-stream"


def sse_event(rpc_id: Any, *, result: Any = None, error: Any = None) -> bytes:
    """One SSE event holding one JSON-RPC response object with the client's id."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id}
    if error is not None:
        body["error"] = error
    else:
        body["result"] = result
    return b"data: " + msgspec.json.encode(body) + b"\n\n"


class ClientFrames:
    """Shape the frames of one stream for a client of one version.

    a2a-sdk 0.3.x clients accept exactly one Task frame per stream and need `final` on
    status updates: for 0.3 a later task snapshot becomes a status update, and the status
    update that settles the task (terminal or interrupted) is the final one.
    """

    def __init__(self, version: str) -> None:
        self.version = version
        self.task_sent = False

    def shape(self, result: object) -> object | None:
        """Return the frame to send for one agent result (None: nothing to send)."""
        found = translate.frame_kind(result)
        if found is None:
            return translate.result(result, self.version)
        kind, obj = found
        if kind == "task":
            if self.version == "0.3" and self.task_sent:
                return self._snapshot_as_status(obj)
            self.task_sent = True
            return translate.result(obj, self.version)
        if kind == "status-update":
            status = obj.get("status")
            state = status.get("state") if isinstance(status, dict) else None
            return translate.result(obj, self.version, final=settles(state))
        return translate.result(obj, self.version)

    def _snapshot_as_status(self, task: dict[str, Any]) -> object | None:
        status = task.get("status")
        if not isinstance(status, dict):
            return None
        update = {"taskId": task.get("id"), "contextId": task.get("contextId"), "status": status}
        return translate.result(
            {"kind": "status-update", **update}, self.version, final=settles(status.get("state"))
        )


def settles(state: object) -> bool:
    """A state after which the agent waits for the caller or is done."""
    return protocol.is_terminal_task_state(state) or protocol.is_interrupted_task_state(state)


async def blocking_frames(call: m.Call, params: m.JSON) -> AsyncGenerator[object]:
    """The agent's blocking answer as the one frame of a stream (SPEC §8.2's fallback)."""
    yield await m.send(call, params)


async def _relay(
    call: m.Call, rpc_id: Any, first: object, rest: AsyncGenerator[object]
) -> AsyncIterator[bytes]:
    frames = ClientFrames(call.version)
    try:
        shaped = frames.shape(first)
        if shaped is not None:
            yield sse_event(rpc_id, result=shaped)
        async for result in rest:
            shaped = frames.shape(result)
            if shaped is not None:
                yield sse_event(rpc_id, result=shaped)
    except m.AgentRpcError as error:
        yield sse_event(rpc_id, error=error.error)
    except AppError as error:
        rendered = from_app_error(error, call.method, call.version).render(call.version)
        yield sse_event(rpc_id, error=rendered)
    except RpcError as error:
        yield sse_event(rpc_id, error=error.render(call.version))
    except Exception:
        log.exception("unexpected error in the %s stream of agent %s", call.method, call.agent_id)
        bug = RpcError(INTERNAL_ERROR, "an unexpected error occurred; it has been logged")
        yield sse_event(rpc_id, error=bug.render(call.version))
    finally:
        await rest.aclose()


def stream_response(
    call: m.Call, rpc_id: Any, first: object, rest: AsyncGenerator[object]
) -> StreamingResponse:
    """Answer 200 text/event-stream: the first frame, then the rest as they come."""
    return StreamingResponse(
        _relay(call, rpc_id, first, rest),
        media_type=SSE,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
