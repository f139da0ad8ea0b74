"""Tokens and logs: one Authorization header, a long enough secret, no query string logged."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest
from multidict import CIMultiDict

from a2a_continue import cli
from a2a_continue.app import create_app
from a2a_continue.settings import Settings, SettingsError
from tests.conftest import JWT_SECRET, Client, token
from tests.core.test_continuation_processes import free_port

REPO = Path(__file__).resolve().parent.parent


async def test_two_authorization_headers_are_401(client: Client) -> None:
    headers = CIMultiDict(
        [("Authorization", f"Bearer {token()}"), ("Authorization", f"Bearer {token('bob@x')}")]
    )
    async with client.session.get(client.base + "/v1/a2a/agents", headers=headers) as r:
        body = await r.read()
        assert r.status == 401, body
        assert r.headers["Content-Type"].startswith("application/problem+json")
        assert "one Authorization header" in msgspec.json.decode(body)["detail"]


def test_create_app_refuses_a_jwt_secret_shorter_than_32_bytes(settings: Settings) -> None:
    short = msgspec.structs.replace(settings, jwt_secret="s" * 31)
    with pytest.raises(SettingsError, match="at least 32 bytes"):
        create_app(short)
    create_app(msgspec.structs.replace(settings, jwt_secret="s" * 32))


def test_serve_refuses_a_jwt_secret_shorter_than_32_bytes_in_one_line(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert settings.database_url
    monkeypatch.setenv("A2AC_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("A2AC_JWT_SECRET", "too-short")
    monkeypatch.setenv("A2AC_ENCRYPTION_KEY", settings.encryption_key)
    assert cli.main(["serve", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "A2AC_JWT_SECRET must be at least 32 bytes" in err


@pytest.fixture
async def served(settings: Settings, tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """``a2a-continue serve`` as its own process, its output captured in a file."""
    assert settings.database_url
    port = free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2AC_")}
    env.update(
        A2AC_DATABASE_URL=settings.database_url,
        A2AC_JWT_SECRET=JWT_SECRET,
        A2AC_ENCRYPTION_KEY=settings.encryption_key,
    )
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "a2a_continue", "serve", "--port", str(port)),
            stdout=out,
            stderr=out,
            env=env,
            cwd=REPO,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(400):
                try:
                    async with session.get(base + "/healthz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
        yield base, log
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)


async def test_query_strings_never_reach_the_log_of_a_served_gateway(
    served: tuple[str, Path],
) -> None:
    base, log = served
    bearer = {"Authorization": f"Bearer {token()}"}
    async with aiohttp.ClientSession() as session:
        for path, headers, status in [
            ("/v1/a2a/agents?access_token=SECRET-ONE", bearer, 200),
            ("/v1/a2a/agents?access_token=SECRET-TWO", {}, 401),
            ("/nowhere?access_token=SECRET-THREE", bearer, 404),
            ("/v1/a2a/agents?cursor=SECRET-FOUR", bearer, 422),
            ("/healthz?access_token=SECRET-FIVE", {}, 200),
        ]:
            async with session.get(base + path, headers=headers) as r:
                assert r.status == status, await r.read()
    await asyncio.sleep(0.2)
    written = log.read_text()
    assert "serving on" in written
    assert "SECRET" not in written
