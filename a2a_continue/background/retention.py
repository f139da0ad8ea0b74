"""The retention loop: with ``A2AC_RETENTION_DAYS`` set, prune old terminal tasks every
``A2AC_RETENTION_SWEEP_S``; the lease in core/tasks/retention keeps it to one process at a time."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractAsyncContextManager, nullcontext

from a2a_continue.core.tasks import retention
from a2a_continue.obs import metrics
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.running import running

log = logging.getLogger(__name__)


async def prune_once(gw: Gateway, days: float) -> retention.Pruned:
    """One run: delete what is due, count it and log it."""
    settings = gw.settings
    # A run is a series of short statements, longer in all than a request's loan.
    async with gw.pool.acquire() as conn:
        pruned = await retention.prune(conn, days, batch=settings.retention_batch)
    if pruned.ran:
        metrics.pruned_tasks(pruned.tasks)
        log.info(
            "retention: deleted %d terminal tasks completed over %g days ago, with %d events",
            pruned.tasks,
            days,
            pruned.events,
        )
    else:
        log.info("retention: another process is pruning; skipped this run")
    return pruned


async def _prune_forever(gw: Gateway, days: float) -> None:
    while True:
        try:
            await prune_once(gw, days)
        except Exception as exc:
            log.warning("retention run failed: %s", type(exc).__name__)
        await asyncio.sleep(gw.settings.retention_sweep_s)


def pruning(gw: Gateway) -> AbstractAsyncContextManager[None]:
    """Prune in the background while the block runs (only with A2AC_RETENTION_DAYS set)."""
    days = gw.settings.retention_days
    if days is None:
        return nullcontext()
    return running(_prune_forever(gw, days), name="a2ac-retention")
