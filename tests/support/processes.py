"""``a2a-continue`` as its own process: the command, its environment, and running ``serve``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from a2a_continue.runtime.secrets import new_key
from tests.support.client import JWT_SECRET, Client
from tests.support.database import topology_env

REPO = Path(__file__).resolve().parents[2]
CLI = (sys.executable, "-m", "a2a_continue")
# The claim margin of the gateways the tests spawn: a claim outlives the agent timeout by it.
CLAIM_MARGIN_S = 0.5


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the run's A2AC_ and PROMETHEUS_ settings, plus
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("A2AC_", "PROMETHEUS_"))}
    env.update(extra)
    return env


def gateway_env(
    database_url: str, encryption_key: str | None = None, **extra: str
) -> dict[str, str]:
    """The environment of a ``serve`` on ``database_url`` that accepts the test tokens."""
    return clean_env(
        A2AC_DATABASE_URL=database_url,
        A2AC_JWT_SECRET=JWT_SECRET,
        A2AC_ENCRYPTION_KEY=encryption_key or new_key(),
        **{**topology_env(database_url), **extra},
    )


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run one ``a2a-continue`` command to its end; return what it printed."""
    return subprocess.run(
        (*CLI, *args), env=env, capture_output=True, text=True, timeout=120, check=False
    )


def start_serve(env: dict[str, str], port: int, *args: str, **output: Any) -> subprocess.Popen[Any]:
    """Start ``a2a-continue serve`` on ``port`` (``output``: where its stdout and stderr go)."""
    return subprocess.Popen(
        (*CLI, "serve", "--port", str(port), *args), env=env, cwd=REPO, **output
    )


def ready(port: int) -> bool:
    """Whether the gateway on ``port`` answers /readyz with 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(port: int, process: subprocess.Popen[Any], within_s: float = 90) -> None:
    """Wait (bounded) until the ``serve`` on ``port`` is ready; fail if it exits first."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "serve exited early"
        if ready(port):
            return
        time.sleep(0.1)
    pytest.fail(f"serve on port {port} did not become ready")


@dataclass
class GatewayProcess:
    """A gateway running as its own ``a2a-continue serve`` process."""

    url: str
    process: asyncio.subprocess.Process
    log: Path


async def wait_until_ready(gateway: GatewayProcess, within_s: float = 60) -> None:
    """Wait (bounded) until the gateway answers /readyz with 200; fail if it exits first."""
    deadline = time.monotonic() + within_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if gateway.process.returncode is not None:
                pytest.fail(f"the gateway exited:\n{gateway.log.read_text()}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(gateway.url + "/readyz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.05)
    pytest.fail(f"the gateway did not become ready:\n{gateway.log.read_text()}")


@contextlib.asynccontextmanager
async def serve_process(
    env: dict[str, str], log: Path, port: int, *args: str
) -> AsyncIterator[GatewayProcess]:
    """Run ``a2a-continue serve`` on ``port``, ready, until the block ends (then killed if
    still running); its output goes to ``log``."""
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *CLI, "serve", "--port", str(port), *args, stdout=out, stderr=out, env=env, cwd=REPO
        )
    gateway = GatewayProcess(f"http://127.0.0.1:{port}", process, log)
    try:
        await wait_until_ready(gateway)
        yield gateway
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def wait_exit(process: asyncio.subprocess.Process) -> int:
    """Wait (bounded) until the process exits; return its exit code."""
    return await asyncio.wait_for(process.wait(), 60)


async def two_gateways(
    spawn: Callable[[], Awaitable[GatewayProcess]], session: aiohttp.ClientSession
) -> tuple[GatewayProcess, Client, GatewayProcess, Client]:
    """Two gateway processes on the test database, and a client of each."""
    a, b = await asyncio.gather(spawn(), spawn())
    return a, Client(a.url, session), b, Client(b.url, session)


@contextlib.contextmanager
def sample_agent_process(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run ``a2a-continue sample-agent`` until the block ends (then SIGTERM, exit 0 checked);
    yield it and the endpoint its first line names."""
    with subprocess.Popen(
        (*CLI, "sample-agent", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            assert "serving on" in first, process.stderr.read() if process.stderr else first
            yield process, first.rsplit(" ", 1)[1].strip()
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    assert process.returncode == 0
