"""What the API description says of each route beyond its path, method and permission:
summary, body and its example, answer, query parameters, problems.

Each example is a body the route accepts as it stands (a test sends every one to a running
gateway): Swagger UI's "Try it out" starts from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from a2a_continue.core.models import (
    AgentCreate,
    AgentList,
    AgentOut,
    AgentPatch,
    CancelBody,
    ContinueBody,
    EventList,
    StartBody,
    TaskList,
    TaskOut,
)

JSON = dict[str, Any]


@dataclass(frozen=True)
class Param:
    """A query parameter."""

    name: str
    description: str
    schema: JSON = field(default_factory=lambda: {"type": "string"})


@dataclass(frozen=True)
class Operation:
    """What the document says of one route beyond its path, method and permission."""

    summary: str
    body: type | JSON | None = None  # a wire type, or the schema of raw JSON
    body_optional: bool = False
    status: int = 200
    answer: type | str | None = None  # a wire type, a description of raw JSON, or nothing
    query: tuple[Param, ...] = ()
    problems: tuple[int, ...] = ()
    task_state: bool = False
    sse: str | None = None  # what the route streams with ``Accept: text/event-stream``
    idempotent: bool = False  # takes an ``Idempotency-Key`` (SPEC §10)
    example: JSON | None = None  # a body the route accepts, for "Try it out"
    location: str | None = None  # what the answer's ``Location`` header names


_LIMIT = Param("limit", "page size", {"type": "integer", "minimum": 1, "maximum": 200})
_CURSOR = Param("cursor", "the `nextCursor` of the previous page")
_AGENT_ANSWER = "the agent's JSON-RPC answer, byte for byte"
_RELAY = (
    "each frame of the agent's stream as one event (`task`, `message`, `status-update`,"
    " `artifact-update`, `error`) whose data is the agent's JSON-RPC object unchanged"
)
_DB = 503
_AGENT = (502, 504)

# Keyed by method and the path in OpenAPI form, whatever convertors the routes use.
AGENT = "/v1/a2a/agents/{agent_id}"
TASK = "/v1/a2a/{agent_id}/tasks/{task_id}"

# The sample agent (`a2a-continue sample-agent`) asks "Which city?", then gives a forecast.
_QUESTION = "What will the weather be tomorrow?"
_JSON_RPC: JSON = {
    "type": "object",
    "description": "a JSON-RPC 2.0 request, in A2A 1.0 or 0.3 names (`SendMessage`,"
    " `message/send`, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`, …)",
    "required": ["jsonrpc", "method"],
}

OPERATIONS: dict[tuple[str, str], Operation] = {
    ("GET", "/healthz"): Operation("The process is alive", answer='`{"status": "ok"}`'),
    ("GET", "/readyz"): Operation(
        "The database answers", answer='`{"status": "ready"}`', problems=(_DB,)
    ),
    ("GET", "/openapi.json"): Operation("This document", answer="the OpenAPI document"),
    ("GET", "/"): Operation(
        "A redirect to the docs page", status=307, location="the docs page (`docs`)"
    ),
    ("GET", "/docs"): Operation("A page rendering this document", answer="text/html"),
    ("GET", "/docs/"): Operation(
        "A redirect to the docs page", status=307, location="the docs page (`../docs`)"
    ),
    ("GET", "/docs/{asset}"): Operation("The docs page's assets", answer="a file", problems=(404,)),
    ("GET", "/metrics"): Operation(
        "Prometheus metrics (text exposition format; every worker's under --workers)",
        answer="text/plain",
    ),
    ("POST", "/v1/a2a/agents"): Operation(
        "Register an agent (by endpoint, or from its agent card with `cardUrl`)",
        body=AgentCreate,
        status=201,
        answer=AgentOut,
        problems=(403, 413, 422, _DB),
        example={
            "name": "Sample weather agent",
            "endpointUrl": "http://127.0.0.1:9999/",
            "protocolVersion": "1.0",
            "visibility": "private",
            "timeoutSeconds": 30,
        },
        location="the new agent: `/v1/a2a/agents/{id}`",
    ),
    ("GET", "/v1/a2a/agents"): Operation(
        "List the agents the caller can see, newest first",
        answer=AgentList,
        query=(_LIMIT, _CURSOR),
        problems=(422, _DB),
    ),
    ("GET", AGENT): Operation("Show one agent", answer=AgentOut, problems=(404, _DB)),
    ("PATCH", AGENT): Operation(
        "Change an agent (owner or admin); `cardUrl` fetches its card again",
        body=AgentPatch,
        answer=AgentOut,
        problems=(403, 404, 413, 422, _DB),
        example={"name": "Weather (renamed)", "timeoutSeconds": 20},
    ),
    ("DELETE", AGENT): Operation(
        "Delete an agent with its tasks and events (owner or admin)",
        status=204,
        problems=(403, 404, _DB),
    ),
    ("POST", "/v1/a2a/{agent_id}/messages"): Operation(
        "Start a task: send the agent a first message",
        body=StartBody,
        answer=_AGENT_ANSWER,
        problems=(400, 403, 404, 413, 422, *_AGENT, _DB),
        task_state=True,
        sse=_RELAY,
        idempotent=True,
        example={"text": _QUESTION},
    ),
    ("GET", "/v1/a2a/{agent_id}/tasks"): Operation(
        "List the caller's tasks of one agent, newest first",
        answer=TaskList,
        query=(
            Param("state", "only tasks in this canonical state"),
            Param("contextId", "only tasks of this context"),
            _LIMIT,
            _CURSOR,
        ),
        problems=(404, 422, _DB),
    ),
    ("GET", TASK): Operation(
        "Show one task (`refresh=true`: ask the agent with GetTask first, record any change)",
        answer=TaskOut,
        query=(Param("refresh", "`true` asks the agent now", {"type": "boolean"}),),
        problems=(404, 422, *_AGENT, _DB),
    ),
    ("GET", TASK + "/events"): Operation(
        "List a task's events after a sequence number, ascending",
        answer=EventList,
        query=(
            Param("after", "return events with a larger `seq`", {"type": "integer", "minimum": 0}),
            Param("limit", "page size", {"type": "integer", "minimum": 1, "maximum": 1000}),
            Param("until", "with the event stream: `terminal` (default) or `interrupted`"),
        ),
        problems=(404, 422, _DB),
        sse="the task's events: `id: <seq>`, `event: <type>`, `data: <the event JSON>`;"
        " resumes after `Last-Event-ID`",
    ),
    ("POST", TASK + "/messages"): Operation(
        "Continue a task: answer an agent waiting in input-required or auth-required",
        body=ContinueBody,
        answer=_AGENT_ANSWER,
        problems=(400, 404, 409, 413, 422, *_AGENT, _DB),
        task_state=True,
        sse=_RELAY,
        idempotent=True,
        example={"text": "Paris"},
    ),
    ("POST", TASK + "/cancel"): Operation(
        "Cancel a task",
        body=CancelBody,
        body_optional=True,
        answer=TaskOut,
        problems=(404, 409, 413, 422, *_AGENT, _DB),
        idempotent=True,
        example={},
    ),
    ("POST", "/a2a/{agent_id}"): Operation(
        "The agent's A2A JSON-RPC endpoint at the gateway (for A2A clients)",
        body=_JSON_RPC,
        answer="the JSON-RPC answer, HTTP 200 for JSON-RPC errors too",
        problems=(404, 413),
        example={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": {"role": "ROLE_USER", "parts": [{"text": _QUESTION}]}},
        },
    ),
}
