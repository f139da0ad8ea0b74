"""Sweeps: follow-up claims whose holder died are put on the record, expired keys removed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from a2a_continue.core.idempotency import keys as idempotency_keys
from a2a_continue.core.tasks.claims import sweep_expired_claims
from a2a_continue.obs import metrics
from a2a_continue.runtime.db import Pool
from a2a_continue.runtime.gateway import Gateway

log = logging.getLogger(__name__)


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
