"""The push dispatcher: every process sends the deliveries the event log owes (SPEC §12, §22).

Woken by the outbox's notification through the process's LISTEN hub (sent only once a
dispatcher has said it has nothing to do), and by one fallback poll per process. Each round
settles what the receivers took since the last one (one statement), then leases up to the free
room of due deliveries (``FOR UPDATE SKIP LOCKED``: pending rows, then the next delivery of
each config whose task's log grew, core/push/outbox.py), sends each at most once at a time
across replicas, and settles it: delivered, retried with back-off and jitter, dead after the
last attempt, or — on 410 — its config disabled. A slow receiver holds one of
``A2AC_PUSH_CONCURRENCY`` slots and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp

from a2a_continue.a2a.netguard import check_call_url, guarded_connector, refused_reason
from a2a_continue.core.push import outbox
from a2a_continue.core.push.configs import PUSH_NETWORKS, sealed_context
from a2a_continue.core.push.keys import load_signer
from a2a_continue.obs import metrics
from a2a_continue.runtime.db import Record
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.runtime.running import cancel_and_wait
from a2a_continue.runtime.signing_keys import Signer, SigningKeyError
from a2a_continue.settings import Settings

log = logging.getLogger(__name__)

# What one delivery's body is, from its row (the façade knows the A2A shapes of each version).
BodyOf = Callable[[Record], bytes]

# How long wake-ups gather before a round, and how soon a busy dispatcher looks again. Under
# load (receivers taking BUSY_RATE deliveries a second or more) they gather longer: each
# round's statement costs the database about as much as its first few deliveries, so fuller
# rounds are what keeps push's share of the database small; the wait is 15 ms of latency.
GATHER_S = 0.005
BUSY_GATHER_S = 0.02
BUSY_RATE = 200.0
# Over about how long that rate is averaged.
RATE_WINDOW_S = 0.25
TAIL_S = 0.1
QUIET_ROUNDS = 6
# How often the pending gauge is read (at most; a scrape comes every 15 s or so).
GAUGE_S = 10.0
# How often a process parks the configs of tasks that ended long ago (core/push/outbox.PARK).
PARK_S = 300.0
# How much of a receiver's answer is read (it is only drained, never stored).
ANSWER_READ_BYTES = 64 * 1024


def retry_after_s(attempts: int, settings: Settings) -> float:
    """The back-off before the next attempt: base doubling per attempt, capped, with jitter
    (a random 50-100 % of it, so that receivers that failed together are not retried in step)."""
    delay: float = min(
        settings.push_retry_max_s, settings.push_retry_base_s * 2 ** max(attempts - 1, 0)
    )
    return delay * random.uniform(0.5, 1.0)


def push_session(settings: Settings) -> aiohttp.ClientSession:
    """The session of push deliveries: it reaches only addresses the guard allows with
    ``A2AC_PUSH_NETWORKS``; per-host bound as for agents; no cookies."""
    connector = guarded_connector(
        settings.push_networks,
        PUSH_NETWORKS,
        limit=settings.push_concurrency,
        limit_per_host=settings.agent_concurrency,
    )
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


class Dispatcher:
    """This process's sender of push deliveries."""

    def __init__(self, settings: Settings, body_of: BodyOf, issuer: str) -> None:
        self.settings = settings
        self.body_of = body_of
        self.issuer = issuer
        # This process's lease token: a row leased by a process that died is retaken once
        # its lease has run out.
        self.lease = uuid.uuid4()
        self._woken = asyncio.Event()
        self._sending: set[asyncio.Task[None]] = set()
        # Deliveries the receivers took, settled together at the start of the next round.
        self._taken: list[tuple[Record, int]] = []
        self._gauge_at = 0.0
        self._park_at = 0.0
        # This dispatcher said it waits (the events of pushed tasks notify until it says not).
        self._asleep = True
        self._busy = False  # the receivers take BUSY_RATE deliveries a second or more
        self._rate = 0.0  # deliveries the receivers took per second, averaged
        self._round_at = time.monotonic()
        self._runner: asyncio.Task[None] | None = None
        self._gw: Gateway | None = None
        self._signer: Signer | None = None
        self._session: aiohttp.ClientSession | None = None

    def wake(self) -> None:
        """Look for due deliveries now (a notification, a settled delivery, a reconnect)."""
        self._woken.set()

    async def start(self, gw: Gateway) -> None:
        """Load the signing key and, unless ``A2AC_PUSH_DISPATCH`` is off, dispatch, in the
        background (a database down at start-up delays deliveries, not the gateway)."""
        self._gw = gw
        self._session = push_session(self.settings)
        if self.settings.push_dispatch:
            gw.hub.on_channel(outbox.PUSH_CHANNEL, self.wake)
        self._runner = asyncio.create_task(self._run(), name="a2ac-push")
        self.wake()

    async def stop(self) -> None:
        """Stop sending; the rows this process holds go back to the queue at once."""
        runner, self._runner = self._runner, None
        await cancel_and_wait(runner)
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
        if self._gw is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2), self._gw.connection() as conn:
                    await self._settle_taken(conn)
                    await outbox.release_leases(conn, self.lease)
        if self._session is not None:
            await self._session.close()

    async def _load_signer(self) -> None:
        assert self._gw is not None
        settings = self.settings
        while self._signer is None:
            try:
                async with self._gw.connection() as conn:
                    self._signer = await load_signer(
                        conn, self._gw.sealer, settings.push_signing_key, self.issuer
                    )
            except SigningKeyError:
                raise
            except Exception as exc:
                log.warning("could not load the push signing key: %s", type(exc).__name__)
                await asyncio.sleep(settings.push_poll_s)

    async def _run(self) -> None:
        await self._load_signer()  # made or supplied once, published by every process
        if not self.settings.push_dispatch:
            return
        quiet = QUIET_ROUNDS  # rounds since the last one that had something to do
        while True:
            # After a busy round, look again soon even unwoken (0.1 s, doubling while nothing
            # turns up, up to the poll): an event recorded while no dispatcher said it waits
            # did not notify, and its commit may land just after this process's last look.
            wait = self.settings.push_poll_s
            if quiet < QUIET_ROUNDS:
                wait = min(wait, TAIL_S * 2**quiet)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._woken.wait()
            # Let the wake-ups of a burst gather: one round takes and settles them together.
            await asyncio.sleep(BUSY_GATHER_S if self._busy else GATHER_S)
            self._woken.clear()
            try:
                quiet = 0 if await self._round() else min(quiet + 1, QUIET_ROUNDS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                quiet = QUIET_ROUNDS
                log.warning("push dispatch round failed: %s", type(exc).__name__)

    async def _round(self) -> bool:
        """Settle what the receivers took since the last round; lease what fits in the free
        room and send each in its own task. Return whether there was anything to do."""
        assert self._gw is not None
        room = self.settings.push_concurrency - len(self._sending)
        settled = len(self._taken)
        async with self._gw.connection() as conn:
            if self._asleep:
                await outbox.awake(conn)
                self._asleep = False
            rows = await self._settle_and_take(conn, room)
            if not (rows or self._sending):
                # Nothing to do: the next pushed event notifies. One recorded before this
                # dispatcher said so did not: look once more.
                self._asleep = True
                await outbox.sleeping(conn, self.settings.push_poll_s)
                rows = await outbox.take(conn, self.lease, self.settings.push_lease_s, room)
            await self._upkeep(conn)
        for row in rows:
            task = asyncio.create_task(self._deliver(row))
            self._sending.add(task)
            task.add_done_callback(self._sent)
        if rows and len(rows) == room:
            self.wake()  # more may be due
        now = time.monotonic()
        elapsed, self._round_at = max(now - self._round_at, 1e-3), now
        weight = min(1.0, elapsed / RATE_WINDOW_S)
        self._rate += weight * (settled / elapsed - self._rate)
        self._busy = self._rate >= BUSY_RATE
        return bool(settled or rows or self._sending)

    async def _upkeep(self, conn: Any) -> None:
        """The pending gauge (every GAUGE_S at most) and the parking of ended configs."""
        now = time.monotonic()
        if now >= self._gauge_at:
            self._gauge_at = now + GAUGE_S
            metrics.push_pending(await outbox.count_pending(conn))
        if now >= self._park_at:
            self._park_at = now + PARK_S
            await outbox.park(conn)

    async def _settle_and_take(self, conn: Any, room: int) -> list[Record]:
        """Settle what the receivers took and lease what fits in ``room``: in one statement,
        unless the configs just settled could go on past the room."""
        lease_s = self.settings.push_lease_s
        if self._taken and room >= len(self._taken):
            taken, self._taken = self._taken, []
            try:
                return await outbox.round_of(conn, taken, self.lease, lease_s, room)
            except BaseException:
                self._taken.extend(taken)  # the next round tries again
                raise
        await self._settle_taken(conn)
        return await outbox.take(conn, self.lease, lease_s, room) if room > 0 else []

    async def _settle_taken(self, conn: Any) -> None:
        taken, self._taken = self._taken, []
        if taken:
            try:
                await outbox.delivered(conn, taken, self.lease)
            except BaseException:
                self._taken.extend(taken)  # the next round tries again
                raise

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        # A settled delivery may free the next one of its config, and a slot.
        self.wake()

    def headers(self, row: Record, body: bytes) -> dict[str, str]:
        """The headers of one attempt (the token, the credentials, or the gateway's JWT)."""
        assert self._gw is not None and self._signer is not None
        headers = {"A2A-Delivery-Id": str(row["id"])}
        if row["version"] == "1.0":
            headers["Content-Type"] = "application/a2a+json"
            headers["A2A-Version"] = "1.0"
        else:
            headers["Content-Type"] = "application/json"
        context = sealed_context(row["config"])
        if row["token_sealed"] is not None:
            headers["X-A2A-Notification-Token"] = str(
                self._gw.sealer.open(row["token_sealed"], context)
            )
        scheme = row["auth_scheme"]
        if scheme and row["credentials_sealed"] is not None:
            credentials = self._gw.sealer.open(row["credentials_sealed"], context)
            headers["Authorization"] = f"{scheme} {credentials}"
        elif scheme and scheme.lower() == "bearer":
            jwt = self._signer.sign(
                audience=row["url"],
                delivery_id=str(row["id"]),
                task_id=row["task_id"],
                body=body,
            )
            headers["Authorization"] = f"Bearer {jwt}"
        return headers

    async def _deliver(self, row: Record) -> None:
        started = time.monotonic()
        status: int | None = None
        try:
            body = self.body_of(row)
            headers = self.headers(row, body)
            status = await self._post(row["url"], body, headers)
            error = f"the receiver answered {status}"
        except (aiohttp.ClientError, OSError) as exc:
            refused = refused_reason(exc)
            error = (
                f"refused address: {refused}" if refused else f"unreachable: {type(exc).__name__}"
            )
        except TimeoutError:
            error = f"no answer within {self.settings.push_timeout_s:g} s"
        except Exception as exc:
            # Not sent (a header aiohttp refuses to write, from a config made before the
            # gateway checked them): a failed attempt like any other, so that the delivery
            # goes dead in the end and the config's later ones go on.
            error = f"could not be sent: {type(exc).__name__}"
            log.warning("push delivery %s could not be sent: %s", row["id"], type(exc).__name__)
        try:
            await self._settle(row, status, error, time.monotonic() - started)
        except Exception as exc:
            # The lease runs out and another attempt is made: at-least-once.
            log.warning("could not settle push delivery %s: %s", row["id"], type(exc).__name__)

    async def _post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        assert self._session is not None
        check_call_url(url, self.settings.push_networks, PUSH_NETWORKS)
        async with (
            asyncio.timeout(self.settings.push_timeout_s),
            self._session.post(url, data=body, headers=headers, allow_redirects=False) as resp,
        ):
            await resp.content.read(ANSWER_READ_BYTES)
            return resp.status

    async def _settle(self, row: Record, status: int | None, error: str, seconds: float) -> None:
        assert self._gw is not None
        if status is not None and 200 <= status < 300:
            # Recorded with the others at the next round (which this delivery's end wakes).
            self._taken.append((row, status))
            metrics.push_delivery("delivered", seconds)
            return
        async with self._gw.connection() as conn:
            if status == 410:
                await outbox.gone(conn, row, self.lease, error)
                metrics.push_delivery("disabled", seconds)
                log.info("push config %s disabled: its receiver answered 410", row["config"])
            else:
                state = await outbox.failed(
                    conn,
                    row,
                    self.lease,
                    status=status,
                    error=error,
                    retry_s=retry_after_s(row["attempts"], self.settings),
                    max_attempts=self.settings.push_max_attempts,
                )
                outcome = "dead" if state == "dead" else "retry"
                metrics.push_delivery(outcome, seconds)
                if outcome == "dead":
                    log.warning("push delivery %s is dead after %d attempts (%s)",
                                row["id"], row["attempts"], error)  # fmt: skip
