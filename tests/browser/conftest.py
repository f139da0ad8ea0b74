"""The browser suite's world: a gateway process, the sample agent, Debian's chromium.

These tests are marked ``browser`` and left out of the default run; ``make test-browser``
runs them. Chromium is the system's (``apt-get install chromium``), driven by Playwright
through ``executable_path``: no browser is downloaded.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from tests.support.client import token
from tests.support.ports import free_port
from tests.support.processes import gateway_env, sample_agent_process, start_serve, wait_ready

JSON = dict[str, Any]
CHROMIUM = os.environ.get("A2AC_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Every wait of the suite is bounded by this (Playwright's timeouts are in milliseconds).
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)
ADMIN = token("admin@example.com", admin=True)
ALICE = token("alice@example.com", teams=["blue"])


class Rest:
    """The gateway's REST API as one caller, outside the page."""

    def __init__(self, base: str, bearer: str) -> None:
        self.base = base
        self.http = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {bearer}"}, timeout=30
        )

    def call(self, method: str, path: str, json: Any = None) -> httpx.Response:
        return self.http.request(method, path, json=json)

    def register(self, body: JSON) -> JSON:
        r = self.call("POST", "/v1/a2a/agents", body)
        assert r.status_code == 201, r.text
        agent: JSON = r.json()
        return agent

    def start(self, agent: JSON, text: str = "What will the weather be tomorrow?") -> JSON:
        r = self.call("POST", f"/v1/a2a/{agent['id']}/messages", {"text": text})
        assert r.status_code == 200, r.text
        result = r.json()["result"]
        task_id = result["task"]["id"] if "task" in result else result["id"]
        return self.task(agent, task_id)

    def task(self, agent: JSON, task_id: str) -> JSON:
        r = self.call("GET", f"/v1/a2a/{agent['id']}/tasks/{task_id}")
        assert r.status_code == 200, r.text
        task: JSON = r.json()
        return task

    def reply(self, agent: JSON, task: JSON, text: str) -> JSON:
        r = self.call("POST", f"/v1/a2a/{agent['id']}/tasks/{task['id']}/messages", {"text": text})
        assert r.status_code == 200, r.text
        answer: JSON = r.json()
        return answer


@pytest.fixture(scope="session")
def gateway(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway serving on its own port, as its own process."""
    port = free_port()
    log = tmp_path_factory.mktemp("gateway") / "serve.log"
    env = gateway_env(database_url, A2AC_PORT=str(port))
    with log.open("wb") as out:
        process = start_serve(env, port, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_ready(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=60)


@pytest.fixture(scope="session")
def gateway_env_of(database_url: str, gateway: str) -> dict[str, str]:
    """The environment the gateway runs with (for `a2a-continue console`)."""
    return gateway_env(database_url, A2AC_PORT=gateway.rsplit(":", 1)[1])


@pytest.fixture(scope="session")
def sample_agent() -> Iterator[str]:
    """The sample agent (A2A 1.0 card; it answers 0.3 too); its URL."""
    with sample_agent_process("--port", str(free_port())) as (_process, url):
        yield url


@pytest.fixture(scope="session")
def rest(gateway: str) -> Iterator[Rest]:
    """The REST API as alice (team blue)."""
    client = Rest(gateway, ALICE)
    yield client
    client.http.close()


@pytest.fixture(scope="session")
def agents(rest: Rest, sample_agent: str) -> tuple[JSON, JSON]:
    """Two agents of alice: the sample agent from its card (it streams), and by hand as 0.3."""
    streaming = rest.register({"cardUrl": sample_agent, "visibility": "team", "teamId": "blue"})
    by_hand = rest.register(
        {"name": "Weather 0.3", "endpointUrl": sample_agent, "protocolVersion": "0.3"}
    )
    assert streaming["capabilities"]["streaming"] is True
    return streaming, by_hand


@pytest.fixture(scope="session")
def playwright(database_url: str) -> Iterator[Playwright]:
    """Playwright's driver; after the database (its sync API keeps an event loop running,
    where the database fixture's ``asyncio.run`` could not run)."""
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    """Headless chromium of the system (no sandbox: CI runs as root)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no chromium at {CHROMIUM}: apt-get install -y chromium chromium-driver")
    launched = playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
    )
    yield launched
    launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser profile per test: no session storage, no cookies."""
    ctx = browser.new_context(viewport={"width": 1100, "height": 900})
    ctx.set_default_timeout(WAIT_MS)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    """A page that fails the test on any script error (a CSP violation included)."""
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))

    def on_console(message: ConsoleMessage) -> None:
        # A refused request (401, 404, 409: what the page shows as a problem) is logged by
        # the browser itself; anything else logged as an error fails the test.
        if message.type == "error" and "Failed to load resource" not in message.text:
            errors.append(message.text)

    tab.on("console", on_console)
    yield tab
    assert errors == []


@dataclass
class Hooks:
    """What a push receiver got: each delivery's ``A2A-Delivery-Id``, in arrival order."""

    url: str = ""
    ids: list[str] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, holds: Callable[[list[str]], bool], what: str) -> list[str]:
        """Wait (bounded) until ``holds(ids)``; return the ids."""
        with self.changed:
            if not self.changed.wait_for(lambda: holds(self.ids), timeout=WAIT_MS / 1000):
                pytest.fail(f"never happened: {what} (got {self.ids})")
            return list(self.ids)


@pytest.fixture
def receiver() -> Iterator[Hooks]:
    """A push receiver on 127.0.0.1 that answers 200: a small aiohttp app on its own thread's
    event loop (Playwright's sync API holds this thread's)."""
    hooks = Hooks()

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        with hooks.changed:
            hooks.ids.append(request.headers["A2A-Delivery-Id"])
            hooks.changed.notify_all()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)

    async def serve() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port: int = runner.addresses[0][1]
        return port

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        port = asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=30)
        hooks.url = f"http://127.0.0.1:{port}/hook"
        yield hooks
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
