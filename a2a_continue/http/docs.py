"""The docs page: Swagger UI, from a package, rendering ``/openapi.json``; no outside URL."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from a2a_continue.errors import NotFound
from a2a_continue.http.routes import PUBLIC, ApiRoute, Operation


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

# The page's own script (Swagger UI is started from a file: the CSP allows no inline script).
INIT_SCRIPT = """window.ui = SwaggerUIBundle({
  url: "openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  persistAuthorization: false
});
"""

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
<script src="docs/init.js"></script>
</body>
</html>
"""

# As strict as the console's: scripts, styles and requests only from the gateway, nothing
# inline, no frames. Swagger UI's style sheet draws its icons as data: images.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


async def docs(request: Request) -> Response:
    """A page rendering the OpenAPI document (Swagger UI, served by the gateway)."""
    return HTMLResponse(DOCS_PAGE, headers=HEADERS)


async def docs_asset(request: Request) -> Response:
    """One asset of the docs page, from the Swagger UI package (or the page's own script)."""
    name = request.path_params["asset"]
    if name == "init.js":
        return Response(INIT_SCRIPT, media_type="text/javascript", headers=HEADERS)
    media_type = ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"no docs asset named {name!r}")
    return FileResponse(ASSETS_DIR / name, media_type=media_type, headers=HEADERS)


async def home(request: Request) -> Response:
    """Send a browser to the docs page."""
    return RedirectResponse("docs", status_code=307)  # relative: it works behind any prefix


async def docs_slash(request: Request) -> Response:
    """Send ``/docs/`` to the docs page (its URLs are relative to ``/docs``)."""
    return RedirectResponse("../docs", status_code=307)


_REDIRECT = "A redirect to the docs page"

ROUTES = [
    ApiRoute(
        "GET",
        "/",
        home,
        PUBLIC,
        Operation(_REDIRECT, status=307, location="the docs page (`docs`)"),
    ),
    ApiRoute(
        "GET",
        "/docs",
        docs,
        PUBLIC,
        Operation("A page rendering this document", answer="text/html"),
    ),
    ApiRoute(
        "GET",
        "/docs/",
        docs_slash,
        PUBLIC,
        Operation(_REDIRECT, status=307, location="the docs page (`../docs`)"),
    ),
    ApiRoute(
        "GET",
        "/docs/{asset}",
        docs_asset,
        PUBLIC,
        Operation("The docs page's assets", answer="a file", problems=(404,)),
    ),
]
