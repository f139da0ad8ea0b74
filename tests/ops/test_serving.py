"""Serving: `serve --workers N` answers from N processes; SIGTERM drains and releases claims."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest

from a2a_continue.core.callers import mint_token
from a2a_continue.runtime.secrets import new_key
from tests.conftest import JWT_SECRET, Client, FakeAgent, Handler, register
from tests.test_cli import free_port

CLI = (sys.executable, "-m", "a2a_continue")
StartFake = Callable[[Handler], Any]


def serve_env(database_url: str, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("A2AC_", "PROMETHEUS_"))}
    env.update(
        A2AC_DATABASE_URL=database_url,
        A2AC_JWT_SECRET=JWT_SECRET,
        A2AC_ENCRYPTION_KEY=new_key(),
        A2AC_PORT=str(port),
        A2AC_LOG_FORMAT="json",
        **extra,
    )
    return env


def spawn(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen((*CLI, "serve", *args), env=env, stdout=out, stderr=out)


def text_of(log: Path) -> str:
    return log.read_text()


async def logged(log: Path, text: str) -> None:
    """Wait until the serve log shows ``text``."""
    for _ in range(1200):
        if text in text_of(log):
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"the log never showed {text!r}")


@asynccontextmanager
async def served(
    env: dict[str, str], log: Path, *args: str
) -> AsyncIterator[tuple[subprocess.Popen[bytes], str]]:
    """Run `serve` until the block ends (killed if still running); yield it and its URL."""
    base = f"http://127.0.0.1:{env['A2AC_PORT']}"
    process = spawn(env, log, *args)
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(600):
                assert process.poll() is None, text_of(log)
                try:
                    async with session.get(base + "/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            else:
                pytest.fail("serve did not become ready")
        yield process, base
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def request_lines(log: Path) -> list[dict[str, Any]]:
    lines = [
        msgspec.json.decode(line) for line in log.read_bytes().splitlines() if line[:1] == b"{"
    ]
    return [line for line in lines if line.get("logger") == "a2a_continue.request"]


async def wait_exit(process: subprocess.Popen[bytes]) -> int:
    return await asyncio.to_thread(process.wait, 60)


def input_required(task_id: str) -> dict[str, Any]:
    task = {"id": task_id, "contextId": "C", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}
    return {"jsonrpc": "2.0", "result": {"task": task}}


async def test_two_workers_both_answer_on_one_port_and_metrics_cover_both(
    database_url: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    log = tmp_path / "serve.log"
    env = serve_env(database_url, free_port(), A2AC_WORKERS="2")
    async with served(env, log) as (process, base):
        pids: set[int] = set()
        sent = 1  # the readiness probe
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            for _ in range(100):

                async def health() -> None:
                    async with session.get(base + "/healthz") as r:
                        assert r.status == 200

                await asyncio.gather(*(health() for _ in range(16)))
                sent += 16
                pids = {line["pid"] for line in request_lines(log) if line["route"] == "/healthz"}
                if len(pids) == 2:
                    break
            assert len(pids) == 2, "one worker answered every request"
            assert process.pid not in pids

            scraper = mint_token(JWT_SECRET, "prometheus", ["a2a.metrics"])
            async with session.get(
                base + "/metrics", headers={"Authorization": f"Bearer {scraper}"}
            ) as r:
                assert r.status == 200
                text = await r.text()
        counted = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("a2ac_http_requests_total{") and 'route="/healthz"' in line
        )
        assert counted >= sent - 1  # every worker's requests, the probes of start-up included

        process.send_signal(signal.SIGTERM)
        assert await wait_exit(process) == 0
    workers = [line for line in text_of(log).splitlines() if "Finished server process" in line]
    assert len(workers) == 2, text_of(log)


async def test_sigterm_lets_an_in_flight_follow_up_finish_with_200_and_releases_its_claim(
    database_url: str, db: asyncpg.Connection, tmp_path: Path, fake_agent: StartFake
) -> None:
    arrived, answer = asyncio.Event(), asyncio.Event()

    async def agent_handler(body: dict[str, Any]) -> Any:
        if body["params"]["message"].get("taskId") is None:
            return {**input_required("T1"), "id": body["id"]}
        arrived.set()
        await answer.wait()
        return {**input_required("T1"), "id": body["id"]}

    agent: FakeAgent = await fake_agent(agent_handler)
    log = tmp_path / "serve.log"
    async with (
        served(serve_env(database_url, free_port()), log) as (process, base),
        aiohttp.ClientSession() as session,
    ):
        client = Client(base, session)
        agent_id = await register(client, agent.url)
        assert (
            await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"})
        ).status == 200
        url = f"/v1/a2a/{agent_id}/tasks/T1/messages"
        follow_up = asyncio.create_task(client.call("POST", url, {"text": "Paris"}))
        await arrived.wait()

        process.send_signal(signal.SIGTERM)
        await logged(log, "Shutting down")
        answer.set()
        r = await follow_up
        assert r.status == 200, r.raw
        assert r.headers["A2A-Task-State"] == "input-required"
        assert await wait_exit(process) == 0

    row = await db.fetchrow("SELECT claim_token, last_seq FROM a2a_tasks WHERE task_id = 'T1'")
    assert row is not None
    assert (row["claim_token"], row["last_seq"]) == (None, 2)


async def test_sigterm_past_the_drain_time_cancels_the_follow_up_and_releases_its_claim(
    database_url: str, db: asyncpg.Connection, tmp_path: Path, fake_agent: StartFake
) -> None:
    arrived, never = asyncio.Event(), asyncio.Event()

    async def agent_handler(body: dict[str, Any]) -> Any:
        if body["params"]["message"].get("taskId") is None:
            return {**input_required("T1"), "id": body["id"]}
        arrived.set()
        await never.wait()
        return {}

    agent = await fake_agent(agent_handler)
    log = tmp_path / "serve.log"
    env = serve_env(database_url, free_port(), A2AC_DRAIN_S="1", A2AC_AGENT_TIMEOUT_S="600")
    async with served(env, log) as (process, base), aiohttp.ClientSession() as session:
        client = Client(base, session)
        agent_id = await register(client, agent.url)
        await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"})
        url = f"/v1/a2a/{agent_id}/tasks/T1/messages"
        follow_up = asyncio.create_task(client.call("POST", url, {"text": "Paris"}))
        await arrived.wait()
        claimed = await db.fetchval("SELECT claim_token FROM a2a_tasks WHERE task_id = 'T1'")
        assert claimed is not None

        process.send_signal(signal.SIGTERM)
        assert await wait_exit(process) == 0
        r = await follow_up
        assert r.status == 503, r.raw
        assert r.json()["type"].endswith(":shutting-down")
        assert r.headers["Retry-After"] == "1"

    row = await db.fetchrow("SELECT claim_token, state FROM a2a_tasks WHERE task_id = 'T1'")
    assert row is not None
    assert (row["claim_token"], row["state"]) == (None, "input-required")
