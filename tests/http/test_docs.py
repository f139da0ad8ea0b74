"""The docs page (/docs): the console's security headers, and a page its CSP lets render."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from a2a_continue.http import docs
from tests.support.client import Client

SECURITY_HEADERS = (
    "Content-Security-Policy",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "Referrer-Policy",
)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "style" or "style" in names or any(k.startswith("on") for k in names):
            self.inline.append(tag)
        if tag == "script" and not names.get("src"):
            self.inline.append(tag)


def directives(csp: str) -> dict[str, list[str]]:
    parsed = (part.split() for part in csp.split(";") if part.strip())
    return {name: sources for name, *sources in parsed}


async def test_the_docs_page_sends_the_consoles_security_headers(client: Client) -> None:
    page = await client.call("GET", "/docs", bearer=None)
    console = await client.call("GET", "/console", bearer=None)
    assert page.status == console.status == 200
    csp = directives(page.headers["Content-Security-Policy"])
    assert csp["default-src"] == ["'none'"]
    assert csp["script-src"] == csp["style-src"] == csp["connect-src"] == ["'self'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in page.headers["Content-Security-Policy"]
    assert "'unsafe-eval'" not in page.headers["Content-Security-Policy"]
    for name in SECURITY_HEADERS[1:]:
        assert page.headers[name] == console.headers[name], name
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["X-Content-Type-Options"] == "nosniff"


async def test_the_docs_assets_carry_the_security_headers_too(client: Client) -> None:
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "init.js", "favicon-32x32.png"):
        r = await client.call("GET", f"/docs/{asset}", bearer=None)
        assert r.status == 200, asset
        for name in SECURITY_HEADERS:
            assert r.headers[name] == docs.HEADERS[name], (asset, name)


async def test_everything_the_docs_page_loads_is_allowed_by_its_csp(client: Client) -> None:
    html = (await client.call("GET", "/docs", bearer=None)).raw.decode()
    page = _Page()
    page.feed(html)
    assert page.inline == []  # no inline script, style or handler: 'self' allows none
    assert page.links and all(re.fullmatch(r"docs/[\w.-]+", link) for link in page.links)
    init = await client.call("GET", "/docs/init.js", bearer=None)
    assert init.headers["Content-Type"].startswith("text/javascript")
    assert '"openapi.json"' in init.raw.decode()  # a relative URL: connect-src 'self'
    css = (await client.call("GET", "/docs/swagger-ui.css", bearer=None)).raw.decode()
    for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", css):
        assert url.startswith("data:"), url  # img-src 'self' data:
    assert "data:" in directives(docs.CSP)["img-src"]
