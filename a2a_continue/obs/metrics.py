"""The Prometheus series of the gateway (prefix ``a2ac_``) and their exposition.

Every series of the specification is declared here, so any module moves one through a
helper. Labels never carry a caller, a token or a task id. Under ``serve --workers N`` the
parent sets ``PROMETHEUS_MULTIPROC_DIR`` before the workers start, and ``exposition`` merges
what every worker wrote there.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

# Requests to the gateway take about a millisecond; agents take up to their timeout.
_HTTP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

HTTP_REQUESTS = Counter(
    "a2ac_http_requests", "Requests answered, by route template", ["route", "method", "status"]
)
HTTP_DURATION = Histogram(
    "a2ac_http_request_duration_seconds",
    "Time from a request's arrival to its answer's last byte",
    ["route"],
    buckets=_HTTP_BUCKETS,
)
AGENT_CALLS = Counter(
    "a2ac_agent_calls",
    "Calls to agents: ok, rpc-error, unreachable, bad-answer, timeout",
    ["method", "outcome"],
)
AGENT_DURATION = Histogram(
    "a2ac_agent_call_duration_seconds",
    "Time an agent took to answer, by A2A method",
    ["method"],
    buckets=_HTTP_BUCKETS,
)
FOLLOWUPS = Counter("a2ac_followups", "Follow-ups: continued, busy, terminal, failed", ["outcome"])
CLAIMS_EXPIRED = Counter("a2ac_claims_expired", "Claims found expired and taken over")
SSE_STREAMS = Gauge("a2ac_sse_streams", "Open event streams", multiprocess_mode="livesum")
WATCHED_TASKS = Gauge(
    "a2ac_watched_tasks", "Tasks the watcher follows", multiprocess_mode="livesum"
)
PRUNED_TASKS = Counter(
    "a2ac_pruned_tasks", "Terminal tasks deleted by retention, with their events"
)
IDEMPOTENT_REPLAYS = Counter("a2ac_idempotent_replays", "Answers replayed for a repeated key")
DB_POOL = Gauge(
    "a2ac_db_pool_connections",
    "Database connections of the pool: idle, in_use",
    ["state"],
    multiprocess_mode="livesum",
)
# -- push notifications (SPEC §12) --
PUSH_DELIVERIES = Counter(
    "a2ac_push_deliveries", "Push delivery attempts: delivered, retry, dead, disabled", ["outcome"]
)
PUSH_PENDING = Gauge(
    "a2ac_push_pending", "Push deliveries waiting to be sent", multiprocess_mode="max"
)
PUSH_DURATION = Histogram("a2ac_push_delivery_seconds", "Duration of one push delivery attempt")
# -- push in (SPEC §19) --
PUSH_IN = Counter(
    "a2ac_push_in",
    "Pushes agents sent the gateway: recorded, unchanged, unauthorized, not-found, too-large,"
    " invalid, unavailable",
    ["outcome"],
)
# -- signed agent cards (SPEC §18) --
CARD_SIGNATURE_CHECKS = Counter(
    "a2ac_card_signature_checks",
    "Checks of a fetched agent card's signatures: verified, unsigned, invalid",
    ["outcome"],
)
# -- fair shares (SPEC §20) --
RATE_LIMITED = Counter(
    "a2ac_rate_limited", "Requests refused by a limit: rate-limited, too-many-in-flight", ["kind"]
)

UNMATCHED = "unmatched"


class HttpSeries:
    """The request series' children, looked up once per (route, method, status)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, int], Any] = {}
        self._durations: dict[str, Any] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request and its duration."""
        key = (route, method, status)
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = HTTP_REQUESTS.labels(route, method, str(status))
        count.inc()
        duration = self._durations.get(route)
        if duration is None:
            duration = self._durations[route] = HTTP_DURATION.labels(route)
        duration.observe(seconds)


_children: dict[tuple[Any, ...], Any] = {}


def _child(series: Any, *labels: str) -> Any:
    """The labelled child of a series, looked up in prometheus-client once."""
    key = (series, *labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = series.labels(*labels)
    return child


def agent_call(method: str, outcome: str, seconds: float) -> None:
    """Count one call to an agent and how long it took."""
    _child(AGENT_CALLS, method, outcome).inc()
    _child(AGENT_DURATION, method).observe(seconds)


def card_signature_check(outcome: str) -> None:
    """Count one check of a fetched card's signatures: verified, unsigned or invalid."""
    _child(CARD_SIGNATURE_CHECKS, outcome).inc()


def followup(outcome: str) -> None:
    """Count one follow-up by outcome: continued, busy, terminal or failed."""
    _child(FOLLOWUPS, outcome).inc()


def claim_expired(count: int = 1) -> None:
    """Count claims found expired (taken over by a follow-up, or released by the sweep)."""
    CLAIMS_EXPIRED.inc(count)


def pruned_tasks(count: int) -> None:
    """Count terminal tasks retention deleted (``pruned_tasks_total``)."""
    PRUNED_TASKS.inc(count)


def sse_stream(delta: int) -> None:
    """Move the open-streams gauge (+1 when a stream opens, -1 when it closes)."""
    SSE_STREAMS.inc(delta)


def watched_tasks(count: int) -> None:
    """Set how many tasks the watcher of this process follows."""
    WATCHED_TASKS.set(count)


def idempotent_replay() -> None:
    """Count an answer replayed for a repeated idempotency key."""
    IDEMPOTENT_REPLAYS.inc()


def db_pool(size: int, idle: int) -> None:
    """Set the pool gauges of this process."""
    DB_POOL.labels("idle").set(idle)
    DB_POOL.labels("in_use").set(size - idle)


def multiprocess_dir() -> str | None:
    """The directory the workers share their series in, when serving with several."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposition() -> tuple[bytes, str]:
    """The current series as Prometheus text, merged over the workers when there are several."""
    if multiprocess_dir() is None:
        return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_LATEST


def worker_exited(pid: int) -> None:
    """Forget the gauges of a worker that has stopped (multi-process mode only)."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def push_delivery(outcome: str, seconds: float) -> None:
    """Count one push delivery attempt and how long it took."""
    _child(PUSH_DELIVERIES, outcome).inc()
    PUSH_DURATION.observe(seconds)


def push_pending(count: int) -> None:
    """Set how many push deliveries wait to be sent (across the database)."""
    PUSH_PENDING.set(count)


def rate_limited(kind: str) -> None:
    """Count one request refused by a limit (``rate-limited`` or ``too-many-in-flight``)."""
    _child(RATE_LIMITED, kind).inc()


def push_in(outcome: str) -> None:
    """Count one push an agent sent the gateway, by what came of it (``push_in_total``)."""
    _child(PUSH_IN, outcome).inc()
