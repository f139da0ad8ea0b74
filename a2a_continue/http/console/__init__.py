"""The console (SPEC §13): one page and its assets, shipped in this folder, and the
exchange of a one-time sign-in code for a short-lived token.

The page reads everything else from the REST API with the token the person signed in with.
Its responses carry a strict Content-Security-Policy: scripts, styles and requests only from
the gateway itself, nothing inline, no frames.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response

from a2a_continue.core.access import console_codes
from a2a_continue.core.access.console_codes import SignedIn, SignInBody
from a2a_continue.core.shapes.wire import decode_body
from a2a_continue.errors import AppError, NotFound
from a2a_continue.http.handlers import gateway_of, json_response, read_body
from a2a_continue.http.routes import PUBLIC, ApiRoute, Operation

HERE = Path(__file__).resolve().parent
ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
    " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class CodeRefused(AppError):
    """A sign-in code that signs in nobody (as OAuth's ``invalid_grant``: a 400)."""

    status, slug, title = 400, "sign-in-code-refused", "Sign-in link refused"


async def page(request: Request) -> Response:
    """The console page (every view: the view and its filters are in the query string)."""
    return FileResponse(HERE / "index.html", media_type="text/html", headers=HEADERS)


async def asset(request: Request) -> Response:
    """The page's script or style sheet."""
    name = request.path_params["asset"]
    media_type = ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"no console asset named {name!r}")
    return FileResponse(HERE / name, media_type=media_type, headers=HEADERS)


async def page_slash(request: Request) -> Response:
    """Send ``/console/`` to the page (its URLs are relative to ``/console``)."""
    return RedirectResponse("../console", status_code=307)


async def sign_in(request: Request) -> Response:
    """Exchange a one-time code of ``a2a-continue console`` for a short-lived token."""
    body = decode_body(await read_body(request), SignInBody)
    gw = gateway_of(request)
    if not gw.settings.jwt_secret:
        raise NotFound("sign-in links need A2AC_JWT_SECRET: this gateway signs no tokens")
    async with gw.connection() as conn:
        caller = await console_codes.take_code(conn, body.code)
    if caller is None:
        raise CodeRefused("this sign-in link is unknown, already used or expired")
    settings = gw.settings
    signed = console_codes.sign_in(
        caller,
        settings.jwt_secret,
        settings.console_token_ttl_s,
        issuer=settings.jwt_issuer,
        audience=settings.jwt_audience,
    )
    answer = json_response(signed)
    answer.headers["Cache-Control"] = "no-store"
    return answer


ROUTES = [
    ApiRoute(
        "GET",
        "/console",
        page,
        PUBLIC,
        Operation("The console: a web page for the people who use the gateway", answer="text/html"),
    ),
    ApiRoute(
        "GET",
        "/console/",
        page_slash,
        PUBLIC,
        Operation("A redirect to the console", status=307, location="the console (`../console`)"),
    ),
    ApiRoute(
        "GET",
        "/console/{asset}",
        asset,
        PUBLIC,
        Operation("The console's script and style sheet", answer="a file", problems=(404,)),
    ),
    ApiRoute(
        "POST",
        "/console/sign-in",
        sign_in,
        PUBLIC,
        Operation(
            "Exchange the one-time code of an `a2a-continue console` link for a short-lived"
            ' token: body `{"code": "<the code after #code= in the link>"}` (a code works once,'
            " so the description carries no example to try)",
            answer=SignedIn,
            problems=(400, 404, 413, 422, 503),
        ),
    ),
]
