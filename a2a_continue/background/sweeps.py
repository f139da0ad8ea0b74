"""Sweeps: follow-up claims whose holder died are put on the record, expired keys removed."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractAsyncContextManager

from a2a_continue.core.idempotency import keys as idempotency_keys
from a2a_continue.core.tasks.claims import sweep_expired_claims
from a2a_continue.obs import metrics
from a2a_continue.runtime.db import Pool
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.running import running

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


def sweeping_claims(gw: Gateway) -> AbstractAsyncContextManager[None]:
    """Sweep expired claims every ``claim_sweep_s`` while the block runs."""
    return running(_sweep_forever(gw), name="a2ac-claim-sweeper")


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


def sweeping_keys(pool: Pool, period_s: float) -> AbstractAsyncContextManager[None]:
    """Remove expired keys every ``period_s`` while the block runs."""
    return running(sweep_keys_forever(pool, period_s), name="idempotency-sweeper")
