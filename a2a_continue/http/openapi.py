"""The API description: an OpenAPI 3.1 document built from the route table, the permission
table and the msgspec wire types, and a docs page rendering it with Swagger UI from a package.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from a2a_continue import errors
from a2a_continue.core.callers import PERMISSIONS, PUBLIC
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
from a2a_continue.errors import PROBLEM_JSON, AppError

JSON = dict[str, Any]
PROBLEM_PREFIX = "urn:a2a-continue:problem:"


class ErrorItem(msgspec.Struct):
    """Where a body or a query parameter is wrong, and why."""

    loc: str
    msg: str


class Problem(msgspec.Struct, kw_only=True):
    """An RFC 9457 problem document; ``type`` is ``urn:a2a-continue:problem:<slug>``."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[ErrorItem] | msgspec.UnsetType = msgspec.UNSET
    state: str | msgspec.UnsetType = msgspec.UNSET


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
    body: type | None = None
    body_optional: bool = False
    status: int = 200
    answer: type | str | None = None  # a wire type, a description of raw JSON, or nothing
    query: tuple[Param, ...] = ()
    problems: tuple[int, ...] = ()
    task_state: bool = False
    sse: str | None = None  # what the route streams with ``Accept: text/event-stream``
    idempotent: bool = False  # takes an ``Idempotency-Key`` (SPEC §10)


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

OPERATIONS: dict[tuple[str, str], Operation] = {
    ("GET", "/healthz"): Operation("The process is alive", answer='`{"status": "ok"}`'),
    ("GET", "/readyz"): Operation(
        "The database answers", answer='`{"status": "ready"}`', problems=(_DB,)
    ),
    ("GET", "/openapi.json"): Operation("This document", answer="the OpenAPI document"),
    ("GET", "/docs"): Operation("A page rendering this document", answer="text/html"),
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
    ),
    ("POST", TASK + "/cancel"): Operation(
        "Cancel a task",
        body=CancelBody,
        body_optional=True,
        answer=TaskOut,
        problems=(404, 409, 413, 422, *_AGENT, _DB),
        idempotent=True,
    ),
}

# The header of a safe retry, and what marks its replayed answer.
_KEY_PARAM: JSON = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "1 to 255 printable ASCII characters, per caller: a retry with the same key"
    " and the same request gets the kept answer again instead of reaching the agent",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
}
_REPLAYED_HEADER: JSON = {
    "description": "`true` on an answer replayed for a repeated Idempotency-Key",
    "schema": {"type": "string", "enum": ["true"]},
}

# What the handlers check beyond the types, where JSON Schema can say it.
_ONE_OF_MESSAGE_OR_TEXT = {"oneOf": [{"required": ["message"]}, {"required": ["text"]}]}
RULES: dict[str, JSON] = {
    "AgentCreate": {
        "anyOf": [
            {"required": ["cardUrl"]},
            {"required": ["name", "endpointUrl", "protocolVersion"]},
        ]
    },
    "ContinueBody": _ONE_OF_MESSAGE_OR_TEXT,
    "StartBody": _ONE_OF_MESSAGE_OR_TEXT,
}

_PARAM = re.compile(r"{([^}:]+)(?::([^}]+))?}")


def openapi_path(path: str) -> str:
    """A Starlette path template in OpenAPI form (``{agent_id:uuid}`` → ``{agent_id}``)."""
    return _PARAM.sub(r"{\1}", path)


def _path_params(path: str) -> list[JSON]:
    params = []
    for name, convertor in _PARAM.findall(path):
        schema: JSON = {"type": "string"}
        if convertor == "uuid":
            schema["format"] = "uuid"
        elif convertor == "int":
            schema = {"type": "integer"}
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    return params


def _app_errors(cls: type[AppError] = AppError) -> Iterator[type[AppError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _app_errors(sub)


def problem_types() -> dict[int, list[str]]:
    """Every problem type the gateway answers with, by status."""
    by_status: dict[int, set[str]] = {
        401: {"unauthorized"},
        403: {"forbidden"},
        404: {"not-found"},
        405: {"method-not-allowed"},
        500: {"internal-error"},
    }
    for cls in _app_errors():
        by_status.setdefault(cls.status, set()).add(cls.slug)
    return {status: sorted(slugs) for status, slugs in sorted(by_status.items())}


def _problem_response(status: int, slugs: Sequence[str]) -> JSON:
    kinds = ", ".join(f"`{PROBLEM_PREFIX}{slug}`" for slug in slugs)
    return {
        "description": f"problem types: {kinds}" if kinds else "a problem",
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def _answer(op: Operation, ref: dict[type, JSON]) -> JSON:
    answer: JSON = {"description": op.summary}
    if isinstance(op.answer, type):
        answer["description"] = op.answer.__doc__ or op.answer.__name__
        answer["content"] = {"application/json": {"schema": ref[op.answer]}}
    elif isinstance(op.answer, str) and op.answer.startswith("text/"):
        answer["content"] = {op.answer: {"schema": {"type": "string"}}}
    elif isinstance(op.answer, str):
        answer["description"] = op.answer
        answer["content"] = {"application/json": {"schema": {"type": "object"}}}
    if op.sse is not None:
        answer.setdefault("content", {})["text/event-stream"] = {
            "schema": {"type": "string", "description": op.sse}
        }
    if op.task_state:
        answer["headers"] = {
            "A2A-Task-State": {
                "description": "the task's canonical state after the call (absent when the"
                " agent answered with a message)",
                "schema": {"type": "string"},
            }
        }
    if op.idempotent:
        answer.setdefault("headers", {})["Idempotent-Replayed"] = _REPLAYED_HEADER
    return answer


def _operation(
    route: Route, method: str, op: Operation, ref: dict[type, JSON], problems: dict[int, list[str]]
) -> JSON:
    key = (method, route.path)
    public = key in PUBLIC
    permission = PERMISSIONS.get(key)
    doc = (route.endpoint.__doc__ or "").strip()
    needs = (
        "No token needed."
        if public
        else f"Needs permission `{permission}`."
        if permission
        else "Not in the permission table: denied."
    )
    result: JSON = {
        "operationId": route.name,
        "summary": op.summary,
        "description": f"{doc}\n\n{needs}".strip(),
        "tags": [_tag(route.path)],
        "parameters": _path_params(route.path)
        + [
            {
                "name": p.name,
                "in": "query",
                "required": False,
                "description": p.description,
                "schema": p.schema,
            }
            for p in op.query
        ],
        "responses": {str(op.status): _answer(op, ref)},
    }
    if public:
        result["security"] = []
    else:
        result["x-permission"] = permission
    if op.body is not None:
        result["requestBody"] = {
            "required": not op.body_optional,
            "content": {"application/json": {"schema": ref[op.body]}},
        }
    codes = set(op.problems) | ({401, 403} if not public else set())
    if op.idempotent:
        result["parameters"].append(_KEY_PARAM)
        codes |= {409, 422}  # a key in flight, streamed, reused or malformed
    if op.body is not None:
        codes |= {408, 413, 422}  # a body that arrives too slowly, too large, or invalid
    for status in sorted(codes):
        result["responses"][str(status)] = _problem_response(status, problems.get(status, []))
    return result


def _tag(path: str) -> str:
    if path.startswith("/v1/a2a/agents"):
        return "agents"
    if path.startswith("/v1/a2a/"):
        return "tasks"
    return "service"


def build_document(routes: Sequence[BaseRoute]) -> JSON:
    """The OpenAPI 3.1 document of ``routes``."""
    wire: list[type] = [Problem]
    for op in OPERATIONS.values():
        for kind in (op.body, op.answer):
            if isinstance(kind, type) and kind not in wire:
                wire.append(kind)
    refs, components = msgspec.json.schema_components(
        wire, ref_template="#/components/schemas/{name}"
    )
    ref = dict(zip(wire, refs, strict=True))
    for name, rule in RULES.items():
        if name in components:
            components[name].update(rule)
    problems = problem_types()
    paths: dict[str, JSON] = {}
    seen: set[str] = set()
    for route in routes:
        if not isinstance(route, Route):
            continue
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            op = OPERATIONS.get((method, openapi_path(route.path))) or Operation(
                (route.endpoint.__doc__ or route.name).strip().split("\n")[0]
            )
            item = paths.setdefault(openapi_path(route.path), {})
            operation = _operation(route, method, op, ref, problems)
            if operation["operationId"] in seen:
                operation["operationId"] += "_" + method.lower()
            seen.add(operation["operationId"])
            item[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "a2a-continue",
            "version": _version(),
            "description": (
                "An async gateway in front of A2A agents: register agents, start tasks, answer"
                " an agent waiting for input, cancel; every task and its event log are kept."
                " Each operation names the permission its bearer token needs (`x-permission`);"
                ' a token with `"*"` has them all. Errors are RFC 9457 problem details.'
            ),
        },
        "tags": [
            {"name": "agents", "description": "the agent registry"},
            {"name": "tasks", "description": "tasks, follow-ups, events"},
            {"name": "service", "description": "health and this description"},
        ],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "HS256 with the gateway's secret, or RS256/ES256 from the"
                    " configured JWKS; claims `sub`, `exp`, `permissions`, `teams`, `is_admin`.",
                }
            },
        },
        "security": [{"bearer": []}],
    }


def _version() -> str:
    try:
        return metadata.version("a2a-continue")
    except metadata.PackageNotFoundError:
        return "0"


_document: bytes | None = None


async def openapi_json(request: Request) -> Response:
    """The OpenAPI 3.1 document of this gateway."""
    global _document
    if _document is None:
        from a2a_continue.app import ROUTES  # the app imports this module

        _document = msgspec.json.encode(build_document(ROUTES))
    return Response(_document, media_type="application/json")


def _assets_dir() -> Path:
    """Swagger UI's files in the package ``swagger_ui_bundle`` (``vendor/swagger-ui-<version>``)."""
    vendor = Path(str(resources.files("swagger_ui_bundle"))) / "vendor"
    found = sorted(vendor.glob("swagger-ui-*"))
    if not found:
        raise RuntimeError(f"no Swagger UI files under {vendor}")
    return found[-1]


ASSETS_DIR = _assets_dir()
ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "favicon-32x32.png": "image/png",
    "favicon-16x16.png": "image/png",
}

# Every URL is relative, so the page works behind any prefix and reaches nothing outside.
DOCS_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>a2a-continue API</title>
<link rel="stylesheet" href="docs/swagger-ui.css">
<link rel="icon" type="image/png" href="docs/favicon-32x32.png" sizes="32x32">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({
  url: "openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  persistAuthorization: false
});
</script>
</body>
</html>
"""


async def docs(request: Request) -> Response:
    """A page rendering the OpenAPI document (Swagger UI, served by the gateway)."""
    return HTMLResponse(DOCS_PAGE)


async def docs_asset(request: Request) -> Response:
    """One asset of the docs page, from the Swagger UI package."""
    name = request.path_params["asset"]
    media_type = ASSETS.get(name)
    if media_type is None:
        raise errors.NotFound(f"no docs asset named {name!r}")
    return FileResponse(ASSETS_DIR / name, media_type=media_type)


ROUTES = [
    Route("/openapi.json", openapi_json, methods=["GET"]),
    Route("/docs", docs, methods=["GET"]),
    Route("/docs/{asset}", docs_asset, methods=["GET"]),
]
