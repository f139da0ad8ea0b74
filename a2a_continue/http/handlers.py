"""Thin HTTP endpoints: decode, call one use case, encode."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from a2a_continue.core.access.callers import Caller
from a2a_continue.core.agents import cards
from a2a_continue.core.agents import registry as agents
from a2a_continue.core.agents.exchange import Forwarded
from a2a_continue.core.agents.models import AgentCreate, AgentPatch
from a2a_continue.core.idempotency import retries as idempotency
from a2a_continue.core.shapes.messages import CancelBody, ContinueBody
from a2a_continue.core.shapes.wire import decode_body, encode
from a2a_continue.core.tasks import listing as task_list
from a2a_continue.core.tasks import reads as task_reads
from a2a_continue.core.turns import answers as task_answers
from a2a_continue.core.turns import continuation, invoke, relay
from a2a_continue.core.watch import refresh
from a2a_continue.errors import PayloadTooLarge
from a2a_continue.http import sse
from a2a_continue.limits import body_timeout
from a2a_continue.obs.metrics import exposition
from a2a_continue.runtime.gateway import Gateway

JSON = "application/json"


def gateway_of(request: Request) -> Gateway:
    """The app's gateway, from the lifespan state."""
    gw: Gateway = request.scope["state"]["gateway"]
    return gw


def caller_of(request: Request) -> Caller:
    """The authenticated caller of the request."""
    caller: Caller = request.scope["state"]["caller"]
    return caller


def agent_id_of(request: Request) -> uuid.UUID:
    """The agent id of the request's path."""
    agent_id: uuid.UUID = request.path_params["agent_id"]
    return agent_id


async def read_body(
    request: Request, limit: int | None = None, *, drain_to: int | None = None
) -> bytes:
    """Read the body, refusing it with 413 once it exceeds ``limit`` (default
    ``A2AC_MAX_BODY_BYTES``), and with 408 when it has not fully arrived within
    ``body_timeout_s``. With ``drain_to``, a body past the limit is read on and dropped up to
    that many bytes before the 413, so that a sender that writes its whole body first receives
    the status rather than a reset connection."""
    settings = gateway_of(request).settings
    limit = settings.max_body_bytes if limit is None else limit
    stop_at = limit if drain_to is None else max(drain_to, limit)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > stop_at:
        raise PayloadTooLarge(f"the body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(settings.body_timeout_s):
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > stop_at:
                    break
                if size <= limit:
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise body_timeout(settings.body_timeout_s) from None
    if size > limit:
        raise PayloadTooLarge(f"the body is larger than {limit} bytes")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def json_response(value: Any, status: int = 200) -> Response:
    """Encode ``value`` as a JSON response."""
    return Response(encode(value), status_code=status, media_type=JSON)


def forwarded(result: Forwarded) -> Response:
    """Return the agent's answer unchanged, with the task state after the call."""
    headers = {"A2A-Task-State": result.state} if result.state else {}
    return Response(result.raw, media_type=JSON, headers=headers)


async def healthz(request: Request) -> Response:
    """The process is alive."""
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    """The database answers."""
    async with gateway_of(request).connection() as conn:
        await conn.fetchval("SELECT 1")
    return json_response({"status": "ready"})


async def metrics(request: Request) -> Response:
    """The Prometheus series (of every worker)."""
    body, content_type = exposition()
    return Response(body, headers={"Content-Type": content_type})


async def create_agent(request: Request) -> Response:
    """Register an agent for the caller."""
    body = decode_body(await read_body(request), AgentCreate)
    gw = gateway_of(request)
    body, card = await cards.resolve_create(gw, body)
    async with gw.connection() as conn:
        agent = await agents.create_agent(
            conn, caller_of(request), body, gw.sealer, gw.settings.agent_networks, card
        )
    created = json_response(agent, status=201)
    created.headers["Location"] = f"/v1/a2a/agents/{agent.id}"
    return created


async def list_agents(request: Request) -> Response:
    """List the agents the caller can see."""
    async with gateway_of(request).connection() as conn:
        page = await agents.list_agents(conn, caller_of(request), request.query_params)
    return json_response(page)


async def get_agent(request: Request) -> Response:
    """Show one agent."""
    async with gateway_of(request).connection() as conn:
        agent = await agents.get_agent(conn, caller_of(request), agent_id_of(request))
    return json_response(agent)


async def update_agent(request: Request) -> Response:
    """Change an agent (owner or admin)."""
    patch = decode_body(await read_body(request), AgentPatch)
    gw = gateway_of(request)
    patch, card = await cards.resolve_patch(gw, caller_of(request), agent_id_of(request), patch)
    async with gw.connection() as conn:
        agent = await agents.update_agent(
            conn,
            caller_of(request),
            agent_id_of(request),
            patch,
            gw.sealer,
            gw.settings.agent_networks,
            card,
        )
    return json_response(agent)


async def delete_agent(request: Request) -> Response:
    """Delete an agent (owner or admin)."""
    async with gateway_of(request).connection() as conn:
        await agents.delete_agent(conn, caller_of(request), agent_id_of(request))
    return Response(status_code=204)


async def answered(
    request: Request, result: Forwarded, mode: str, task_id: str | None = None
) -> Response:
    """The answer to a send: the agent's body, or with ``answer=task`` the stored task."""
    if mode != task_answers.TASK:
        return forwarded(result)
    task = await task_answers.task_answer(
        gateway_of(request), caller_of(request), agent_id_of(request), result, task_id
    )
    shown = json_response(task)
    shown.headers["A2A-Task-State"] = task.state
    return shown


async def start_task(request: Request) -> Response:
    """Send a first message to an agent (``answer=task``: answer with the stored task)."""
    mode = task_answers.answer_param(request.query_params)
    raw = await read_body(request)
    gw, caller, agent_id = gateway_of(request), caller_of(request), agent_id_of(request)
    body = invoke.decode_start(raw, agent_id)
    async with idempotency.for_request(
        request, raw, "start", answer=task_answers.key_variant(mode)
    ) as held_key:
        if sse.wants_stream(request):
            return held_key.keep(
                await sse.relay_response(
                    gw, lambda: relay.stream_start(gw, caller, agent_id, body, key=held_key)
                )
            )
        result = await invoke.start_task(gw, caller, agent_id, body)
        return held_key.keep(await answered(request, result, mode))


async def list_all_tasks(request: Request) -> Response:
    """List the caller's tasks of every agent they can see."""
    async with gateway_of(request).connection() as conn:
        page = await task_list.list_all_tasks(conn, caller_of(request), request.query_params)
    return json_response(page)


async def list_tasks(request: Request) -> Response:
    """List the caller's tasks of one agent."""
    async with gateway_of(request).connection() as conn:
        page = await task_reads.list_tasks(
            conn, caller_of(request), agent_id_of(request), request.query_params
        )
    return json_response(page)


async def get_task(request: Request) -> Response:
    """Show one task (``?refresh=true``: as the agent reports it now)."""
    task_id = request.path_params["task_id"]
    if refresh.refresh_param(request.query_params):
        fresh = await refresh.refresh_task(
            gateway_of(request), caller_of(request), agent_id_of(request), task_id
        )
        return json_response(fresh)
    async with gateway_of(request).connection() as conn:
        task = await task_reads.get_task(conn, caller_of(request), agent_id_of(request), task_id)
    return json_response(task)


async def list_events(request: Request) -> Response:
    """List a task's events after a sequence number (or stream them, live)."""
    if sse.wants_stream(request):
        return await sse.event_stream_response(
            request,
            gateway_of(request),
            caller_of(request),
            agent_id_of(request),
            request.path_params["task_id"],
        )
    async with gateway_of(request).connection() as conn:
        page = await task_reads.list_events(
            conn,
            caller_of(request),
            agent_id_of(request),
            request.path_params["task_id"],
            request.query_params,
        )
    return json_response(page)


async def continue_task(request: Request) -> Response:
    """Send a follow-up message to a task (``answer=task``: answer with the stored task)."""
    mode = task_answers.answer_param(request.query_params)
    raw = await read_body(request)
    body = decode_body(raw, ContinueBody)
    gw, caller, agent_id = gateway_of(request), caller_of(request), agent_id_of(request)
    task_id = request.path_params["task_id"]
    variant = task_answers.key_variant(mode)
    keyed = idempotency.for_request(request, raw, "continue", with_claim=True, answer=variant)
    async with keyed as held_key:
        if sse.wants_stream(request):
            return held_key.keep(
                await sse.relay_response(
                    gw,
                    lambda: relay.stream_follow_up(
                        gw, caller, agent_id, task_id, body, key=held_key
                    ),
                )
            )
        result = await continuation.continue_task(gw, caller, agent_id, task_id, body, key=held_key)
        return held_key.keep(await answered(request, result, mode, task_id))


async def cancel_task(request: Request) -> Response:
    """Cancel a task."""
    raw = await read_body(request)
    if raw.strip():
        decode_body(raw, CancelBody)
    async with idempotency.for_request(request, raw, "cancel") as held_key:
        task = await invoke.cancel_task(
            gateway_of(request),
            caller_of(request),
            agent_id_of(request),
            request.path_params["task_id"],
        )
        return held_key.keep(json_response(task))
