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
        raise NotFound(f"no docs asset named {name!r}")
    return FileResponse(ASSETS_DIR / name, media_type=media_type)


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
