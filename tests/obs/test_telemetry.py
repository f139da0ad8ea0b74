"""OpenTelemetry: with OTEL_EXPORTER_OTLP_ENDPOINT set, a request, its statements and its
agent call are spans of the caller's trace, and the agent gets the agent call's context."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from a2a_continue.obs.telemetry import request_id_of, traceparent_of
from tests.support.client import Client, register
from tests.support.fakes import StartFake, WeatherFake
from tests.support.ports import free_port
from tests.support.processes import gateway_env, serve_process, wait_exit
from tests.support.servers import serve_aiohttp
from tests.support.waiting import eventually

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


def test_request_ids_are_kept_only_when_well_formed() -> None:
    assert request_id_of(b"a.b:c-d_e") == "a.b:c-d_e"
    assert request_id_of(b"x" * 128) == "x" * 128
    assert request_id_of(b"x" * 129) != "x" * 129
    assert request_id_of(b"a b") != "a b"
    assert request_id_of(None) != request_id_of(None)


def test_traceparents_are_kept_only_when_well_formed() -> None:
    assert traceparent_of(TRACEPARENT.encode()) == TRACEPARENT
    assert traceparent_of(TRACEPARENT.upper().encode()) == TRACEPARENT
    assert traceparent_of(b"ff" + TRACEPARENT.encode()[2:]) is None
    assert traceparent_of(b"00-abc") is None
    assert traceparent_of(None) is None


async def test_spans_of_the_request_its_statements_and_its_agent_call_join_the_callers_trace(
    database_url: str, db: asyncpg.Connection, tmp_path: Path, fake_agent: StartFake
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    exported: list[Any] = []

    async def traces(request: web.Request) -> web.Response:
        batch = ExportTraceServiceRequest()
        batch.ParseFromString(await request.read())
        exported.extend(
            span
            for resource in batch.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        )
        return web.Response(body=b"", content_type="application/x-protobuf")

    collector = web.Application()
    collector.router.add_post("/v1/traces", traces)
    fake = await fake_agent(WeatherFake("1.0"))
    async with serve_aiohttp(collector) as otlp:
        env = gateway_env(database_url, OTEL_EXPORTER_OTLP_ENDPOINT=otlp)
        async with (
            serve_process(env, tmp_path / "serve.log", free_port()) as served,
            aiohttp.ClientSession() as session,
        ):
            process, base = served.process, served.url
            client = Client(base, session)
            agent_id = await register(client, fake.url)
            headers = {"traceparent": TRACEPARENT}
            r = await client.call(
                "POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"}, headers=headers
            )
            assert r.status == 200, r.raw
            sent = fake.headers[-1]["traceparent"]
            process.send_signal(signal.SIGTERM)
            assert await wait_exit(process) == 0
        # The last batch may still be on its way.
        await eventually(
            lambda: any(span.name == "a2a SendMessage" for span in exported), "the agent's span"
        )

    version, trace_id, parent_id, _ = sent.split("-")
    assert (version, trace_id) == ("00", TRACE)
    assert parent_id != "00f067aa0ba902b7"  # the agent call's span, not the caller's
    ours = [span for span in exported if span.trace_id.hex() == TRACE]
    names = {span.name for span in ours}
    assert "POST /v1/a2a/{agent_id}/messages" in names
    assert "a2a SendMessage" in names
    assert any(name.startswith("db ") for name in names)
    call = next(span for span in ours if span.name == "a2a SendMessage")
    assert call.span_id.hex() == parent_id
