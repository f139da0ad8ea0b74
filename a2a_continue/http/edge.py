"""The one ASGI layer in front of the handlers.

Per request, once each: find the route, give the request its id, authenticate the caller
and check the permission the route table gives the route, call the handler, render any
error as problem+json, count the request and write its log line. Routing comes first: a
path no route matches is 404 and a wrong method 405, token or not; a path that fits a
route's template but holds a value its convertor refuses (an agent id that is no UUID)
needs the token like the route, then is 404. A route not from the table (a plain
Starlette route) is denied: 403 even for "*".
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from inspect import isfunction, ismethod
from typing import Any
from urllib.parse import unquote

from starlette.convertors import Convertor, UUIDConvertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import Message, Receive, Scope, Send

from a2a_continue.core.access import callers as auth
from a2a_continue.core.access.callers import Caller, TokenSource
from a2a_continue.core.idempotency.retries import Replayed
from a2a_continue.errors import (
    AppError,
    MethodNotAllowed,
    NotFound,
    ShuttingDown,
    problem_response,
)
from a2a_continue.http.paths import refused_text, routing_path
from a2a_continue.http.routes import PUBLIC, ApiRoute, Handler, check_permission
from a2a_continue.obs import telemetry
from a2a_continue.obs.logs import RequestLog
from a2a_continue.obs.metrics import UNMATCHED, HttpSeries
from a2a_continue.obs.telemetry import RequestInfo
from a2a_continue.runtime.db import as_unavailable

log = logging.getLogger(__name__)

_CONVERTOR = re.compile(r":[a-zA-Z_][a-zA-Z0-9_]*}")
_PARAM = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-zA-Z_][a-zA-Z0-9_]*)?}")

# A path parameter its convertor refused: (name, raw value).
Malformed = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Entry:
    """One route as the edge uses it: how to match it, what to call, how to name it, what
    permission it needs (None: not from the route table, so denied)."""

    route: BaseRoute
    permission: str | None
    path: str  # the route's path with its convertors
    template: str  # the path without convertors, as logs and metrics name the route
    regex: re.Pattern[str] | None
    convertors: dict[str, Convertor[Any]]
    methods: frozenset[str]
    endpoint: Handler | None  # a plain async function of a request; else `route` is ASGI
    loose: re.Pattern[str] | None  # the template with any one segment for each parameter
    anonymous: bool = False  # runs without a token for callers.ANONYMOUS (ApiRoute.anonymous)

    @classmethod
    def of(cls, given: ApiRoute | BaseRoute) -> Entry:
        """Prepare a route of the table, or a plain Starlette route, for matching."""
        permission = given.permission if isinstance(given, ApiRoute) else None
        route: BaseRoute = (
            Route(given.path, given.handler, methods=[given.method])
            if isinstance(given, ApiRoute)
            else given
        )
        if not isinstance(route, Route):
            path = str(getattr(route, "path", ""))
            return cls(
                route, None, path, _CONVERTOR.sub("}", path), None, {}, frozenset(), None, None
            )
        endpoint = (
            route.endpoint if isfunction(route.endpoint) or ismethod(route.endpoint) else None
        )
        return cls(
            route,
            permission,
            route.path,
            _CONVERTOR.sub("}", route.path),
            route.path_regex,
            route.param_convertors,
            frozenset(route.methods or ()),
            endpoint,
            _loose(route.path),
            isinstance(given, ApiRoute) and given.anonymous,
        )

    def match(self, scope: Scope) -> tuple[bool, dict[str, Any]] | None:
        """(method allowed, path params) when the path matches, else None."""
        if self.regex is None:
            found, child = self.route.matches(scope)
            if found == Match.NONE:
                return None
            return found == Match.FULL, child.get("path_params", {})
        m = self.regex.match(scope["path"])
        if m is None:
            return None
        params = {k: self.convertors[k].convert(v) for k, v in m.groupdict().items()}
        return scope["method"] in self.methods, params

    def misfit(self, scope: Scope) -> Malformed | None:
        """The parameter its convertor refuses when the path fits the template, else None."""
        m = self.loose.match(scope["path"]) if self.loose is not None else None
        if m is None:
            return None
        for name, value in m.groupdict().items():
            if not re.fullmatch(self.convertors[name].regex, value):
                return name, value
        return None

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the route's handler and send its response."""
        if self.endpoint is None:
            await self.route.handle(scope, receive, send)
            return
        response = await self.endpoint(Request(scope, receive, send))
        await response(scope, receive, send)


def _loose(path: str) -> re.Pattern[str] | None:
    """``path`` as a pattern taking any one segment for each parameter (None: it has none)."""
    parts = _PARAM.split(path)
    if len(parts) == 1:
        return None
    pattern = "".join(
        re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+)" for i, part in enumerate(parts)
    )
    return re.compile(f"^{pattern}$")


def no_such(name: str, value: str, convertor: Convertor[Any]) -> NotFound:
    """The 404 of a path parameter no resource can have (``agent_id`` → no agent)."""
    noun = name.removesuffix("_id")
    why = f" ({noun} ids are UUIDs)" if isinstance(convertor, UUIDConvertor) else ""
    return NotFound(f"no {noun} with id {unquote(value)!r}{why}")


# The route of a request: (entry, method allowed, path params, a parameter refused).
Found = tuple[Entry | None, bool, dict[str, Any], Malformed | None]


class Edge:
    """The gateway as an ASGI app: the routes behind the one layer, and the lifespan.

    ``routes`` is the route table, plus any plain Starlette route (denied: not in it).
    """

    def __init__(
        self, routes: Sequence[ApiRoute | BaseRoute], tokens: TokenSource, lifespan: Any
    ) -> None:
        self.table = tuple(route for route in routes if isinstance(route, ApiRoute))
        self.entries = [Entry.of(route) for route in routes]
        self.by_method: dict[str, list[Entry]] = {}
        self.tokens = tokens
        self.router = Router(lifespan=lifespan)
        self.http = HttpSeries()
        self.request_log = RequestLog()
        self.inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self  # the app of the lifespan; what hands /openapi.json its table
        kind = scope["type"]
        if kind == "http":
            await self.request(scope, receive, send)
        elif kind == "lifespan":
            await self.router.lifespan(scope, receive, send)

    async def idle(self) -> None:
        """Wait until no request is in flight."""
        await self._idle.wait()

    def match(self, scope: Scope) -> Found:
        """The route of the request: (entry, method allowed, path params, refused param)."""
        method = scope["method"]
        candidates = self.by_method.get(method)
        if candidates is None:
            candidates = self.by_method[method] = [
                e for e in self.entries if e.regex is None or method in e.methods
            ]
        # First the routes that take this method, in order: the first full match is the one
        # the full scan below would find; only a miss (404 or 405) needs every route.
        for entry in candidates:
            found = entry.match(scope)
            if found is not None and found[0]:
                return entry, True, found[1], None
        partial: tuple[Entry, dict[str, Any]] | None = None
        for entry in self.entries:
            found = entry.match(scope)
            if found is None:
                continue
            if found[0]:
                return entry, True, found[1], None
            if partial is None:
                partial = entry, found[1]
        if partial is not None:
            return partial[0], False, partial[1], None
        return self.match_template(scope)

    def match_template(self, scope: Scope) -> Found:
        """The route whose template the path fits though a parameter is refused, if any."""
        partial: tuple[Entry, Malformed] | None = None
        for entry in self.entries:
            misfit = entry.misfit(scope)
            if misfit is None:
                continue
            if scope["method"] in entry.methods:
                return entry, True, {}, misfit
            if partial is None:
                partial = entry, misfit
        if partial is None:
            return None, False, {}, None
        return partial[0], False, {}, partial[1]

    def allowed_methods(self, scope: Scope) -> str:
        """The methods of every route whose path matches (one path may span several)."""
        methods: set[str] = set()
        for entry in self.entries:
            if entry.match(scope) is not None or entry.misfit(scope) is not None:
                methods |= entry.methods
        return ", ".join(sorted(methods))

    async def permit(self, scope: Scope, entry: Entry | None, allowed: bool) -> Caller | None:
        """The caller allowed to make this request (None on a public route), or the refusal.

        The route comes first: what no route serves is refused before any token is read.
        """
        if entry is None:
            raise NotFound(f"no route matches {scope['path']}")
        if not allowed:
            error = MethodNotAllowed(f"{scope['method']} is not allowed on {scope['path']}")
            error.headers["Allow"] = self.allowed_methods(scope)
            raise error
        if entry.permission == PUBLIC:
            return None
        if entry.anonymous and not auth.has_authorization(scope):
            return auth.ANONYMOUS
        caller = await self.tokens.caller(auth.bearer_token(scope))
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        check_permission(caller, entry.permission, method, entry.path)
        return caller

    async def request(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request through the layer."""
        began = time.perf_counter()
        request_id = traceparent = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                request_id = value
            elif name == b"traceparent":
                traceparent = value
        info = RequestInfo(
            telemetry.request_id_of(request_id), telemetry.traceparent_of(traceparent)
        )
        telemetry.current.set(info)
        echo = (b"x-request-id", info.request_id.encode())
        status = 0

        async def reply(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), echo]
            await send(message)

        refused = refused_text(scope)
        raw = scope.get("raw_path")
        if raw and b"%" in raw:
            # Route on the path as the client encoded it: an encoded '/' stays in its segment.
            scope = {**scope, "path": routing_path(raw.partition(b"?")[0])}
        found = self.match(scope)
        entry = found[0]
        self.inflight += 1
        self._idle.clear()
        try:
            if telemetry.tracing():
                route = entry.template if entry else UNMATCHED
                with telemetry.request_span(info, scope["method"], route) as span:
                    await self.guarded(scope, receive, reply, found, info, refused)
                    span.set_attribute("http.response.status_code", status)
            else:
                await self.guarded(scope, receive, reply, found, info, refused)
        finally:
            self.inflight -= 1
            if not self.inflight:
                self._idle.set()
            self.done(scope, entry, status, time.perf_counter() - began, info)

    async def guarded(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        found: Found,
        info: RequestInfo,
        refused: AppError | None,
    ) -> None:
        """Authorize and run the handler; render what it raises as problem+json."""
        entry, allowed, params, misfit = found
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            if refused is not None:
                raise refused
            caller = await self.permit(scope, entry, allowed)
            assert entry is not None
            if caller is not None:
                info.sub = caller.sub
                scope.setdefault("state", {})["caller"] = caller
            if misfit is not None:
                if caller is auth.ANONYMOUS:  # no agent can have that id: not a public one
                    auth.bearer_token(scope)  # raises the 401 of a request without a token
                raise no_such(*misfit, entry.convertors[misfit[0]])
            scope["path_params"] = params
            if "agent_id" in params:
                telemetry.note_task(params["agent_id"], params.get("task_id"))
            await entry.serve(scope, receive, tracked)
        except Replayed as replay:
            await replay.response(scope, receive, tracked)  # the kept answer of a repeated key
        except asyncio.CancelledError:
            # Only a stopping server cancels a request (past its drain time): the handler
            # has released what it held; tell the caller to retry rather than drop it.
            info.reason = "cancelled: the gateway is stopping"
            if not started:
                await problem_response(ShuttingDown())(scope, receive, send)
        except Exception as exc:
            if started:
                info.reason = f"error after the answer began: {type(exc).__name__}"
                log.exception("request %s failed after its answer began", info.request_id)
                return
            error = self.as_app_error(exc, info)
            if error.status >= 500:
                info.reason = f"{error.slug}: {error.detail}"
            await problem_response(error)(scope, receive, send)

    @staticmethod
    def as_app_error(exc: Exception, info: RequestInfo) -> AppError:
        """The problem to answer for ``exc``; a bug is logged, once, and answered 500."""
        if isinstance(exc, AppError):
            return exc
        unavailable = as_unavailable(exc)  # a database fault outside a loan's mapping
        if unavailable is not None:
            return unavailable
        if isinstance(exc, HTTPException):
            error = AppError(exc.detail)
            error.status, error.title = exc.status_code, exc.detail
            error.slug = "not-found" if exc.status_code == 404 else f"http-{exc.status_code}"
            if exc.headers:
                error.headers.update(exc.headers)
            return error
        log.error("request %s hit a bug", info.request_id, exc_info=exc)
        return AppError("an unexpected error occurred; it has been logged")

    def done(
        self, scope: Scope, entry: Entry | None, status: int, seconds: float, info: RequestInfo
    ) -> None:
        """Count the request and write its line."""
        route = entry.template if entry is not None else UNMATCHED
        self.http.observe(route, scope["method"], status, seconds)
        if not self.request_log.enabled():
            return
        fields: dict[str, Any] = {
            "request_id": info.request_id,
            "method": scope["method"],
            "route": route,
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
            "sub": info.sub,
            "agent_id": info.agent_id,
            "task_id": info.task_id,
        }
        if info.upstream is not None:
            fields["upstream"] = info.upstream
            fields["upstream_ms"] = round((info.upstream_s or 0.0) * 1000, 3)
        if info.reason is not None:
            fields["reason"] = info.reason
        self.request_log.write(fields)
