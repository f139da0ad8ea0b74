"""Serving: `serve --workers N` answers from N processes; SIGTERM drains and releases claims."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import msgspec

from a2a_continue.core.access.callers import mint_token
from tests.support.client import JWT_SECRET, Client, register
from tests.support.database import TASKS_WITH_CLAIMS
from tests.support.fakes import FakeAgent, StartFake
from tests.support.ports import free_port
from tests.support.processes import gateway_env, serve_process, wait_exit
from tests.support.waiting import eventually


def text_of(log: Path) -> str:
    return log.read_text()


def serve_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a served gateway whose log lines are JSON, for the test to read."""
    return gateway_env(database_url, A2AC_LOG_FORMAT="json", **extra)


def request_lines(log: Path) -> list[dict[str, Any]]:
    lines = [
        msgspec.json.decode(line) for line in log.read_bytes().splitlines() if line[:1] == b"{"
    ]
    return [line for line in lines if line.get("logger") == "a2a_continue.request"]


def input_required(task_id: str) -> dict[str, Any]:
    task = {"id": task_id, "contextId": "C", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}
    return {"jsonrpc": "2.0", "result": {"task": task}}


async def test_two_workers_both_answer_on_one_port_and_metrics_cover_both(
    database_url: str, db: asyncpg.Connection, tmp_path: Path
) -> None:
    log = tmp_path / "serve.log"
    env = serve_env(database_url, A2AC_WORKERS="2")
    async with serve_process(env, log, free_port()) as served:
        process, base = served.process, served.url
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
        serve_process(serve_env(database_url), log, free_port()) as served,
        aiohttp.ClientSession() as session,
    ):
        process, base = served.process, served.url
        client = Client(base, session)
        agent_id = await register(client, agent.url)
        assert (
            await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"})
        ).status == 200
        url = f"/v1/a2a/{agent_id}/tasks/T1/messages"
        follow_up = asyncio.create_task(client.call("POST", url, {"text": "Paris"}))
        await arrived.wait()

        process.send_signal(signal.SIGTERM)
        await eventually(lambda: "Shutting down" in text_of(log), "the log shows Shutting down")
        answer.set()
        r = await follow_up
        assert r.status == 200, r.raw
        assert r.headers["A2A-Task-State"] == "input-required"
        assert await wait_exit(process) == 0

    row = await db.fetchrow(
        f"SELECT token AS claim_token, last_seq FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T1'"
    )
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
    env = serve_env(database_url, A2AC_DRAIN_S="1", A2AC_AGENT_TIMEOUT_S="600")
    async with (
        serve_process(env, log, free_port()) as served,
        aiohttp.ClientSession() as session,
    ):
        process, base = served.process, served.url
        client = Client(base, session)
        agent_id = await register(client, agent.url)
        await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"})
        url = f"/v1/a2a/{agent_id}/tasks/T1/messages"
        follow_up = asyncio.create_task(client.call("POST", url, {"text": "Paris"}))
        await arrived.wait()
        claimed = await db.fetchval(f"SELECT token FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T1'")
        assert claimed is not None

        process.send_signal(signal.SIGTERM)
        assert await wait_exit(process) == 0
        r = await follow_up
        assert r.status == 503, r.raw
        assert r.json()["type"].endswith(":shutting-down")
        assert r.headers["Retry-After"] == "1"

    row = await db.fetchrow(
        f"SELECT token AS claim_token, state FROM {TASKS_WITH_CLAIMS} WHERE task_id = 'T1'"
    )
    assert row is not None
    assert (row["claim_token"], row["state"]) == (None, "input-required")
