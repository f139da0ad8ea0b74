"""Sweeps: follow-up claims whose holder died are put on the record, expired keys removed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from a2a_continue.core import idempotency_keys
from a2a_continue.obs import metrics
from a2a_continue.runtime.db import Conn, Pool
from a2a_continue.runtime.gateway import Gateway

log = logging.getLogger(__name__)

# Who writes the events of a claim found expired: no caller is present when it is found.
SYSTEM_ACTOR = "a2a-continue"

# The event data of an expired claim, given the row's `claim_expires_at` as `expired_at`.
EXPIRED_DATA = """jsonb_build_object(
    'reason', 'claim-expired',
    'detail', 'the follow-up holding this task ended without recording an outcome',
    'claimExpiredAt', expired_at)"""

# Release every claim that has expired (a batch at a time) and log each as a failed
# follow-up, with the event's seq taken from the same row update.
SWEEP_EXPIRED_CLAIMS = f"""
WITH expired AS (
    SELECT id, claim_expires_at AS expired_at FROM a2a_tasks
    WHERE claim_expires_at < now()
    ORDER BY claim_expires_at LIMIT $2
    FOR UPDATE SKIP LOCKED
), released AS (
    UPDATE a2a_tasks t SET claim_token = NULL, claim_expires_at = NULL,
        last_seq = t.last_seq + 1
    FROM expired WHERE t.id = expired.id
    RETURNING t.id, t.last_seq, t.state, expired.expired_at
)
INSERT INTO a2a_task_events (task, seq, type, previous_state, new_state, actor, data)
SELECT id, last_seq, 'task_continue_failed', state, state, $1, {EXPIRED_DATA}
FROM released
"""


async def sweep_expired_claims(conn: Conn, batch: int = 500) -> int:
    """Release expired claims and log each one; return how many were found."""
    status = await conn.execute(SWEEP_EXPIRED_CLAIMS, SYSTEM_ACTOR, batch)
    return int(status.rsplit(" ", 1)[-1])


async def _sweep_forever(gw: Gateway) -> None:
    while True:
        await asyncio.sleep(gw.settings.claim_sweep_s)
        try:
            async with gw.connection() as conn:
                found = await sweep_expired_claims(conn)
        except Exception as exc:
            log.warning("the sweep of expired claims failed: %s", type(exc).__name__)
            continue
        if found:
            metrics.claim_expired(found)
            log.info("released %d expired follow-up claims", found)


@asynccontextmanager
async def sweeping_claims(gw: Gateway) -> AsyncIterator[None]:
    """Sweep expired claims every ``claim_sweep_s`` while the block runs."""
    task = asyncio.create_task(_sweep_forever(gw))
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


async def sweep_keys_forever(pool: Pool, period_s: float) -> None:
    """Remove expired keys now and then every ``period_s`` seconds, until cancelled."""
    while True:
        try:
            async with pool.acquire() as conn:
                removed = await idempotency_keys.sweep(conn)
            if removed:
                log.info("removed %d expired idempotency keys", removed)
        except Exception as exc:
            log.warning("could not remove expired idempotency keys: %s", exc)
        await asyncio.sleep(period_s)


def start_sweeper(pool: Pool, period_s: float) -> asyncio.Task[None]:
    """Start removing expired keys in the background (stop it with :func:`stop_sweeper`)."""
    return asyncio.create_task(sweep_keys_forever(pool, period_s), name="idempotency-sweeper")


async def stop_sweeper(task: asyncio.Task[None]) -> None:
    """Stop the background removal of expired keys."""
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task
