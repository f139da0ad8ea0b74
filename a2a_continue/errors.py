"""Errors the gateway answers with, rendered as RFC 9457 problem details."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response

PROBLEM_JSON = "application/problem+json"


class AppError(Exception):
    """An error with an HTTP status and a problem type; subclasses name the cases."""

    status = 500
    slug = "internal-error"
    title = "Internal server error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra
        self.headers: dict[str, str] = {}

    def body(self) -> dict[str, Any]:
        """Return the problem document."""
        return {
            "type": f"urn:a2a-continue:problem:{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            **self.extra,
        }


class BadRequest(AppError):
    status, slug, title = 400, "bad-request", "Bad request"


class Unauthorized(AppError):
    status, slug, title = 401, "unauthorized", "Unauthorized"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.headers["WWW-Authenticate"] = 'Bearer realm="a2a-continue"'


class Forbidden(AppError):
    status, slug, title = 403, "forbidden", "Forbidden"


class NotFound(AppError):
    status, slug, title = 404, "not-found", "Not found"


class MethodNotAllowed(AppError):
    status, slug, title = 405, "method-not-allowed", "Method not allowed"


class TaskTerminal(AppError):
    status, slug, title = 409, "task-terminal", "Task is in a terminal state"

    def __init__(self, state: str, action: str) -> None:
        super().__init__(f"the task is {state}; a {state} task cannot be {action}", state=state)


class TaskBusy(AppError):
    status, slug, title = 409, "task-busy", "Another follow-up to this task is in flight"


class NotCancelable(AppError):
    status, slug, title = 409, "task-not-cancelable", "The agent refused to cancel the task"


class PayloadTooLarge(AppError):
    status, slug, title = 413, "payload-too-large", "Request body too large"


class HeadersTooLarge(AppError):
    status, slug, title = 431, "headers-too-large", "Request header fields too large"


class Invalid(AppError):
    status, slug, title = 422, "invalid-body", "Invalid request body"

    def __init__(self, errors: list[dict[str, str]]) -> None:
        detail = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors)
        super().__init__(detail, errors=errors)


class InvalidQuery(Invalid):
    slug, title = "invalid-query", "Invalid query parameter"

    def __init__(self, name: str, msg: str) -> None:
        AppError.__init__(
            self, f"query parameter {name!r} {msg}", errors=[{"loc": f"$.query.{name}", "msg": msg}]
        )


class AgentUnreachable(AppError):
    status, slug, title = 502, "agent-unreachable", "The agent could not be reached"


class AgentBadAnswer(AppError):
    status, slug, title = 502, "agent-bad-answer", "The agent answered with something unusable"


class AgentError(AppError):
    """The agent answered a send with a JSON-RPC error, and the caller asked for the task."""

    status, slug, title = 502, "agent-error", "The agent answered with an error"


class AgentStartedNoTask(AppError):
    """The agent answered a start with a message, and the caller asked for the task."""

    status, slug, title = 502, "agent-started-no-task", "The agent started no task"


class AgentTimeout(AppError):
    status, slug, title = 504, "agent-timeout", "The agent did not answer in time"


class DatabaseUnavailable(AppError):
    status, slug, title = 503, "database-unavailable", "The database is unavailable"

    def __init__(self, detail: str = "the database cannot be reached; try again shortly") -> None:
        super().__init__(detail)
        self.headers["Retry-After"] = "2"


class ShuttingDown(AppError):
    status, slug, title = 503, "shutting-down", "The gateway is stopping"

    def __init__(self) -> None:
        super().__init__("the gateway stopped before this request finished; retry it")
        self.headers["Retry-After"] = "1"


def problem_response(error: AppError) -> Response:
    """Render ``error`` as an ``application/problem+json`` response."""
    return Response(
        msgspec.json.encode(error.body()),
        status_code=error.status,
        media_type=PROBLEM_JSON,
        headers=error.headers,
    )
