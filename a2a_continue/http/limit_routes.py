"""The admins' overrides of the limits (SPEC §20): ``PUT|GET|DELETE
/v1/a2a/limits/{caller|team}/{name}``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.core.limits.limiter import Limiter
from a2a_continue.core.limits.overrides import (
    OverrideBody,
    OverrideOut,
    delete_override,
    get_override,
    override_out,
    put_override,
)
from a2a_continue.core.limits.policy import Kind
from a2a_continue.core.shapes.wire import decode_body
from a2a_continue.errors import Forbidden, Invalid, NotFound
from a2a_continue.http.handlers import caller_of, gateway_of, json_response, read_body
from a2a_continue.http.routes import ApiRoute, Handler, Operation
from a2a_continue.limits import MAX_ID_CHARS

_DB = 503


def _limiter(request: Request) -> Limiter:
    limiter: Limiter = request.scope["state"]["limiter"]
    return limiter


def _subject(request: Request, kind: Kind) -> tuple[Kind, str]:
    if not caller_of(request).is_admin:
        raise Forbidden("only an admin may read or change limits")
    name = str(request.path_params["name"])
    if len(name) > MAX_ID_CHARS:
        msg = f"must be at most {MAX_ID_CHARS} characters"
        raise Invalid([{"loc": "$.path.name", "msg": msg}])
    return kind, name


def _put(kind: Kind) -> Handler:
    async def put_limits(request: Request) -> Response:
        """Store the override of one caller or team; every replica applies it within 5 s."""
        subject = _subject(request, kind)
        body = decode_body(await read_body(request), OverrideBody)
        async with gateway_of(request).connection() as conn:
            row = await put_override(conn, *subject, body)
        _limiter(request).set_override(subject, body.given())
        return json_response(override_out(row, _limiter(request).default(kind)))

    return put_limits


def _get(kind: Kind) -> Handler:
    async def get_limits(request: Request) -> Response:
        """Show the override of one caller or team (404: none)."""
        subject = _subject(request, kind)
        async with gateway_of(request).connection() as conn:
            row = await get_override(conn, *subject)
        if row is None:
            raise NotFound(f"no override of the limits of {kind} {subject[1]!r}")
        return json_response(override_out(row, _limiter(request).default(kind)))

    return get_limits


def _delete(kind: Kind) -> Handler:
    async def delete_limits(request: Request) -> Response:
        """Forget the override of one caller or team (204, again on a repeat)."""
        subject = _subject(request, kind)
        async with gateway_of(request).connection() as conn:
            await delete_override(conn, *subject)
        _limiter(request).set_override(subject, None)
        return Response(status_code=204)

    return delete_limits


_EXAMPLE = {"rps": 10, "burst": 20, "inflight": 5}


def _routes(kind: Kind) -> list[ApiRoute]:
    path = f"/v1/a2a/limits/{kind}/{{name}}"
    who = "caller (`sub`)" if kind == "caller" else "team"
    return [
        ApiRoute(
            "PUT",
            path,
            _put(kind),
            "a2a.update",
            Operation(
                f"Override the limits of one {who} (admins; null = no limit, a missing member"
                " keeps the default)",
                body=OverrideBody,
                answer=OverrideOut,
                problems=(400, 403, 413, 422, 429, _DB),
                example=_EXAMPLE,
            ),
        ),
        ApiRoute(
            "GET",
            path,
            _get(kind),
            "a2a.read",
            Operation(
                f"Show the override of one {who}'s limits (admins)",
                answer=OverrideOut,
                problems=(403, 404, 429, _DB),
            ),
        ),
        ApiRoute(
            "DELETE",
            path,
            _delete(kind),
            "a2a.delete",
            Operation(
                f"Remove the override of one {who}'s limits (admins; 204 again on a repeat)",
                status=204,
                problems=(403, 429, _DB),
            ),
        ),
    ]


ROUTES = [*_routes("caller"), *_routes("team")]
