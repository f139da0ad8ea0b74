"""The API description: an OpenAPI 3.1 document built from the route table (each entry's
path, method, handler, permission and operation) and the msgspec wire types.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from importlib import metadata

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.errors import PROBLEM_JSON, AppError
from a2a_continue.http.limited import counted
from a2a_continue.http.routes import JSON, PUBLIC, ApiRoute, Operation

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
    if op.task_answer is not None:
        answer["description"] += (
            f"; with `answer=task`, the stored task ({op.task_answer.__name__}) instead"
        )
        schema = answer["content"]["application/json"]["schema"]
        answer["content"]["application/json"]["schema"] = {"anyOf": [schema, ref[op.task_answer]]}
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
    if op.location is not None:
        location = {"description": op.location, "schema": {"type": "string"}}
        answer.setdefault("headers", {})["Location"] = location
    return answer


def _operation(route: ApiRoute, ref: dict[type, JSON], problems: dict[int, list[str]]) -> JSON:
    op = route.operation
    public = route.permission == PUBLIC
    doc = (route.handler.__doc__ or "").strip()
    needs = "No token needed." if public else f"Needs permission `{route.permission}`."
    if route.anonymous:
        needs += " Without a token it answers for public agents only (401 for any other)."
    result: JSON = {
        "operationId": route.handler.__name__,
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
        result["x-permission"] = route.permission
    if op.body is not None:
        media: JSON = {"schema": ref[op.body] if isinstance(op.body, type) else op.body}
        if op.example is not None:
            media["example"] = op.example
        result["requestBody"] = {
            "required": not op.body_optional,
            "content": {"application/json": media},
        }
    codes = set(op.problems) | ({401, 403} if not public else set())
    if counted(route):
        codes.add(429)  # the caller's or team's limits (SPEC §20)
    if op.idempotent:
        result["parameters"].append(_KEY_PARAM)
        codes |= {409, 422}  # a key in flight, streamed, reused or malformed
    if isinstance(op.body, type):
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


def build_document(table: Sequence[ApiRoute]) -> JSON:
    """The OpenAPI 3.1 document of the routes of ``table``."""
    wire: list[type] = [Problem]
    for route in table:
        for kind in (route.operation.body, route.operation.answer, route.operation.task_answer):
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
    for route in table:
        item = paths.setdefault(openapi_path(route.path), {})
        operation = _operation(route, ref, problems)
        if operation["operationId"] in seen:
            operation["operationId"] += "_" + route.method.lower()
        seen.add(operation["operationId"])
        item[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "a2a-continue",
            "version": _version(),
            "description": (
                "An async gateway in front of A2A agents: register agents, start tasks, answer"
                " an agent waiting for input, cancel; every task and its event log are kept."
                " Each operation names the permission its bearer token needs (`x-permission`);"
                ' a token with `"*"` has them all. Errors are RFC 9457 problem details; on'
                " every route, a request head (request line and headers) over"
                f" `A2AC_MAX_HEADER_BYTES` is answered 431 `{PROBLEM_PREFIX}headers-too-large`."
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


@lru_cache(maxsize=8)
def _encoded(table: tuple[ApiRoute, ...]) -> bytes:
    """The document of ``table``, encoded once per table (an app's table never changes)."""
    return msgspec.json.encode(build_document(table))


async def openapi_json(request: Request) -> Response:
    """The OpenAPI 3.1 document of this gateway."""
    table: tuple[ApiRoute, ...] = request.app.table  # the edge serving the request
    return Response(_encoded(table), media_type="application/json")


ROUTES = [
    ApiRoute(
        "GET",
        "/openapi.json",
        openapi_json,
        PUBLIC,
        Operation("This document", answer="the OpenAPI document"),
    )
]
