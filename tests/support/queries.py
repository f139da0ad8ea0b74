"""Counting the statements a request sends: the app with its periodic rounds held back, and
the statements of its start-up work (loading the push signing key) left out of the count."""

from __future__ import annotations

import msgspec

from a2a_continue.core.push import keys as push_keys
from a2a_continue.settings import Settings

# What the dispatcher sends once at start-up, whenever its connection comes (a busy machine
# may delay it into a request's window).
_START_UP = ("SELECT pg_advisory_xact_lock($1)", push_keys.SELECT_CURRENT,
             push_keys.INSERT_KEY, push_keys.RETIRE_OTHERS)  # fmt: skip


def quiet(settings: Settings) -> Settings:
    """``settings`` with the periodic rounds (push dispatch, watch pick-up, claim and key
    sweeps, the hub's poll) an hour apart: none of them lands in a request's count."""
    return msgspec.structs.replace(
        settings, push_dispatch=False, push_poll_s=3600.0, watch_pickup_s=3600.0,
        claim_sweep_s=3600.0, stream_poll_s=3600.0, idempotency_sweep_s=3600.0,
    )  # fmt: skip


def request_statements(queries: list[str]) -> list[str]:
    """The statements of ``queries`` a request sent (start-up work left out)."""
    return [q for q in queries if q not in _START_UP]
