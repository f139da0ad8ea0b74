"""The console page, its assets and its sign-in exchange, over HTTP."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import aiohttp
import asyncpg
import jwt
import msgspec

from a2a_continue.app import create_app
from a2a_continue.core.access.console_codes import create_code
from a2a_continue.settings import Settings
from tests.support.client import Client, assert_problem
from tests.support.servers import serve_asgi


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


async def test_the_page_loads_without_a_token_under_a_strict_csp(client: Client) -> None:
    r = await client.call("GET", "/console", bearer=None)
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("text/html")
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp
    assert "script-src 'self'" in csp
    assert "style-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff"


async def test_the_page_has_no_inline_script_or_style_and_no_outside_url(client: Client) -> None:
    html = (await client.call("GET", "/console", bearer=None)).raw.decode()
    assert not re.search(r"https?://", html)
    page = _Page()
    page.feed(html)
    assert page.inline == []
    assets = [link for link in page.links if link.startswith("console/")]
    assert sorted(assets) == ["console/console.css", "console/console.js"]
    for asset, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        r = await client.call("GET", f"/console/{asset}", bearer=None)
        assert r.status == 200
        assert r.headers["Content-Type"].startswith(kind)
        assert not re.search(rb"https?://", r.raw)


async def test_the_script_never_writes_html(client: Client) -> None:
    script = (await client.call("GET", "/console/console.js", bearer=None)).raw.decode()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
    assert "localStorage" not in script.replace("never in a URL, a cookie or localStorage", "")
    assert "document.cookie" not in script


async def test_an_unknown_asset_is_404(client: Client) -> None:
    assert_problem(await client.call("GET", "/console/secrets.json", bearer=None), 404)


async def test_console_slash_leads_to_the_page(client: Client) -> None:
    r = await client.call("GET", "/console/", bearer=None)  # the client follows the redirect
    assert r.status == 200
    assert b'<script src="console/console.js"' in r.raw


async def test_a_code_is_exchanged_once_for_a_token_that_works(
    client: Client, db: asyncpg.Connection
) -> None:
    await db.execute("TRUNCATE a2a_console_codes")
    code = await create_code(db, "admin@localhost", True, 60)
    r = await client.call("POST", "/console/sign-in", {"code": code}, bearer=None)
    assert r.status == 200, r.raw
    assert r.headers["Cache-Control"] == "no-store"
    signed = r.json()
    assert (signed["sub"], signed["isAdmin"], signed["expiresIn"]) == (
        "admin@localhost",
        True,
        3600,
    )
    agents = await client.call("GET", "/v1/a2a/agents", bearer=signed["token"])
    assert agents.status == 200
    again = await client.call("POST", "/console/sign-in", {"code": code}, bearer=None)
    problem = assert_problem(again, 400)
    assert problem["title"] == "Sign-in link refused"
    assert "already used" in problem["detail"]


async def test_the_sign_in_token_carries_the_issuer_and_audience_the_gateway_checks(
    settings: Settings, db: asyncpg.Connection
) -> None:
    checking = msgspec.structs.replace(
        settings, jwt_issuer="https://idp.example.com", jwt_audience="a2a-gateway"
    )
    code = await create_code(db, "admin@localhost", True, 60)
    async with serve_asgi(create_app(checking)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        r = await client.call("POST", "/console/sign-in", {"code": code}, bearer=None)
        assert r.status == 200, r.raw
        token = r.json()["token"]
        claims = jwt.decode(token, options={"verify_signature": False})
        assert (claims["iss"], claims["aud"]) == ("https://idp.example.com", "a2a-gateway")
        agents = await client.call("GET", "/v1/a2a/agents", bearer=token)
        assert agents.status == 200, agents.raw


async def test_a_sign_in_body_without_a_code_is_422(client: Client) -> None:
    r = await client.call("POST", "/console/sign-in", {"token": "x"}, bearer=None)
    assert_problem(r, 422)
