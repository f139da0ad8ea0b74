"""Fair shares at the edge (SPEC §20): each counted route's handler admitted first against
the limits of its caller and of the team it acts for.

What counts: a route that calls an agent or writes (any method but GET) counts against the
rate and the in-flight cap, held until its answer's last byte; a read counts against the
rate only. Not counted: the public routes (health, readiness, the JWKS, the console, the API
description, push-in), ``/metrics`` and the façade's agent cards. A refusal is raised before
the handler runs, so the edge answers it as problem+json on every route, the façade's too.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from a2a_continue.core.access.callers import Caller
from a2a_continue.core.limits.limiter import Admission, Limiter
from a2a_continue.core.limits.policy import Subject
from a2a_continue.http.handlers import caller_of, read_body
from a2a_continue.http.routes import PUBLIC, ApiRoute

READS = frozenset({"GET", "HEAD"})
# The start route: the team it acts for is the body's ``teamId``.
START = "/v1/a2a/{agent_id:uuid}/messages"
NOT_COUNTED = frozenset({"/metrics"})


class _Team(msgspec.Struct):
    teamId: str | None = None


_team_decoder = msgspec.json.Decoder(_Team)


def counted(route: ApiRoute) -> bool:
    """Whether the route counts against the limits."""
    return not (route.permission == PUBLIC or route.anonymous or route.path in NOT_COUNTED)


def limited(routes: list[ApiRoute]) -> list[ApiRoute]:
    """The routes, each counted one admitted by the limits before its handler runs."""
    return [dataclasses.replace(r, handler=_admitting(r)) if counted(r) else r for r in routes]


def _admitting(route: ApiRoute) -> Any:
    handler = route.handler
    inflight = route.method not in READS
    start = route.path == START

    @functools.wraps(handler)  # its name and docstring: the API description reads them
    async def endpoint(request: Request) -> Response:
        limiter: Limiter = request.scope["state"]["limiter"]
        if not limiter.limited("caller") and not limiter.limited("team"):
            return await handler(request)  # no limit anywhere: nothing to count
        caller = caller_of(request)
        subjects: list[Subject] = [("caller", caller.sub)]
        if limiter.limited("team"):
            team, request = await _team(limiter, request, caller, start)
            if team is not None:
                subjects.append(("team", team))
        admission = await limiter.admit(subjects, inflight)
        if not admission.held:
            return await handler(request)
        try:
            return Held(await handler(request), admission)
        except BaseException:
            admission.release()
            raise

    return endpoint


async def _team(
    limiter: Limiter, request: Request, caller: Caller, start: bool
) -> tuple[str | None, Request]:
    """The team the request acts for (only a team of the caller's: no one spends another
    team's budget), and the request to hand on (a start's body, read here, replayed)."""
    team: str | None = None
    if start:
        raw = await read_body(request)
        try:
            team = _team_decoder.decode(raw).teamId
        except msgspec.DecodeError:
            team = None  # the handler refuses the body
        request = Request(request.scope, _replay(raw, request.receive))
    elif "task_id" in request.path_params and "agent_id" in request.path_params:
        params = request.path_params
        team = await limiter.team_of_task(params["agent_id"], str(params["task_id"]))
    if team is None or not (caller.is_admin or team in caller.teams):
        return None, request
    return team, request


def _replay(raw: bytes, receive: Receive) -> Receive:
    """A receive that gives the body already read, then what the client sends next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return replay


class Held(Response):
    """A response whose in-flight slots are given back once its last byte is sent."""

    def __init__(self, inner: Response, admission: Admission) -> None:
        # Not Response.__init__: this renders nothing itself, it runs ``inner``.
        self.inner, self.admission = inner, admission
        self.status_code = inner.status_code
        self.background = None

    @property
    def headers(self) -> Any:
        """The inner response's headers."""
        return self.inner.headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        finally:
            self.admission.release()
