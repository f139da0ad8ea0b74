"""What one request carries through the gateway: its id, its trace context, what its log
line reports; and the optional OpenTelemetry spans."""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

log = logging.getLogger(__name__)

_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
_TRACEPARENT = re.compile(rb"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")

# Ids made here are a random prefix per process and a counter: unique across workers and
# replicas, and far cheaper than a uuid4 per request.
_PREFIX = os.urandom(6).hex()
_COUNTER = itertools.count(1)


def new_id() -> str:
    """A fresh id, unique across processes (request ids, JSON-RPC ids)."""
    return f"{_PREFIX}{next(_COUNTER):x}"


def request_id_of(raw: bytes | None) -> str:
    """Keep a well-formed incoming X-Request-ID, else make one."""
    if raw is not None and _REQUEST_ID.fullmatch(raw):
        return raw.decode("ascii")
    return new_id()


def traceparent_of(raw: bytes | None) -> str | None:
    """Keep a well-formed W3C traceparent (version 00 layout), else none."""
    if raw is not None and _TRACEPARENT.fullmatch(raw.lower()) and not raw.startswith(b"ff"):
        return raw.decode("ascii").lower()
    return None


class RequestInfo:
    """One request's id and trace context, and what its log line reports besides them."""

    __slots__ = (
        "agent_id",
        "outbound",
        "reason",
        "request_id",
        "span",
        "sub",
        "task_id",
        "upstream",
        "upstream_s",
    )

    def __init__(self, request_id: str, traceparent: str | None) -> None:
        self.request_id = request_id
        self.sub: str | None = None
        self.agent_id: str | None = None
        self.task_id: str | None = None
        self.upstream: str | None = None
        self.upstream_s: float | None = None
        self.reason: str | None = None
        self.span: Any = None
        # The headers every call to an agent carries for this request.
        self.outbound: dict[str, str] = {"X-Request-ID": request_id}
        if traceparent is not None:
            self.outbound["traceparent"] = traceparent


current: ContextVar[RequestInfo | None] = ContextVar("a2a_continue_request", default=None)


def outbound_headers() -> dict[str, str]:
    """The request id and trace headers to send an agent (none outside a request)."""
    info = current.get()
    if info is None:
        return {}
    if _tracer is None:
        return info.outbound
    headers = dict(info.outbound)
    _inject(headers)
    return headers


def upstream(outcome: str, seconds: float) -> None:
    """Note how the request's call to its agent went, for its log line."""
    info = current.get()
    if info is not None:
        info.upstream, info.upstream_s = outcome, seconds


def note_task(agent_id: object, task_id: str | None) -> None:
    """Note the agent and task a request concerns, for its log line."""
    info = current.get()
    if info is not None:
        info.agent_id = str(agent_id)
        info.task_id = task_id


# ---- OpenTelemetry (optional: the `otel` extra and OTEL_EXPORTER_OTLP_ENDPOINT) -----------

_tracer: Any = None


def setup_tracing() -> bool:
    """Export spans when OTEL_EXPORTER_OTLP_ENDPOINT is set and the otel extra is installed."""
    global _tracer
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or _tracer is not None:
        return _tracer is not None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not installed")
        return False
    name = os.environ.get("OTEL_SERVICE_NAME") or "a2a-continue"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer("a2a_continue")
    return True


def tracing() -> bool:
    """Tell whether spans are being made."""
    return _tracer is not None


def _inject(headers: dict[str, str]) -> None:
    from opentelemetry.propagate import inject

    inject(headers)


@contextmanager
def request_span(info: RequestInfo, method: str, route: str) -> Iterator[Any]:
    """A server span for the request, child of the caller's traceparent when it sent one."""
    from opentelemetry import context, trace
    from opentelemetry.propagate import extract

    parent = (
        extract({"traceparent": info.outbound["traceparent"]})
        if ("traceparent" in info.outbound)
        else None
    )
    span = _tracer.start_span(
        f"{method} {route}", context=parent, kind=trace.SpanKind.SERVER,
        attributes={"http.request.method": method, "http.route": route,
                    "a2ac.request_id": info.request_id},
    )  # fmt: skip
    token = context.attach(trace.set_span_in_context(span))
    try:
        yield span
    finally:
        context.detach(token)
        span.end()


def agent_span(method: str, url: str) -> AbstractContextManager[None]:
    """A client span around one call to an agent (no-op without tracing)."""
    if _tracer is None:
        return _NO_SPAN
    return _agent_span(method, url)


_NO_SPAN = nullcontext()


@contextmanager
def _agent_span(method: str, url: str) -> Iterator[None]:
    from opentelemetry import trace

    with _tracer.start_as_current_span(
        f"a2a {method}", kind=trace.SpanKind.CLIENT,
        attributes={"rpc.method": method, "server.address": url},
    ):  # fmt: skip
        yield


def statement_span(record: Any) -> None:
    """Record a finished statement as a span (an asyncpg query logger)."""
    end = time.time_ns()
    elapsed = int((getattr(record, "elapsed", 0.0) or 0.0) * 1e9)
    query = str(getattr(record, "query", ""))
    span = _tracer.start_span(
        "db " + query.split(None, 1)[0].upper() if query.strip() else "db",
        start_time=end - elapsed,
        attributes={"db.system.name": "postgresql", "db.query.text": query[:2000]},
    )
    span.end(end_time=end)
