"""Safe retries: an ``Idempotency-Key`` makes a start, a follow-up or a cancel happen once.

A key belongs to one caller. The first request with it takes the key in PostgreSQL (one
``INSERT … ON CONFLICT``, so two processes can never both take it), reaches the agent and
keeps the answer; a retry with the same key and the same request gets that answer again,
byte for byte, and the agent is not called. Where nothing happened (the gateway's own 4xx)
or the outcome is unknown (502, 503, 504) nothing is kept: the key is released and a retry
goes through.

Use a key around one request::

    async with idempotent(gw, caller, key, "start", agent_id, request_hash(...)) as held_key:
        response = held_key.keep(await do_it())

A follow-up takes its key in the statement that claims the task: it passes ``held_key`` to the
claim (``held_key.param()`` in, ``held_key.settle(row)`` out) and opens the hold ``with_claim``. A
streamed answer is never kept: the stream calls ``held_key.mark_streamed(task_id)`` and retries
are sent to the task's events. A replay is raised as :class:`Replayed`; the edge
(``middleware.py``) answers it with the kept bytes, the A2A façade (``facade/keys.py``)
translates it for its client. The statements on the keys are ``idempotency_keys``'; the
expired keys are swept by ``background.sweeps``.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.core.access.callers import Caller
from a2a_continue.core.idempotency import keys
from a2a_continue.errors import (
    AgentError,
    AgentStartedNoTask,
    AppError,
    NotCancelable,
    problem_response,
)
from a2a_continue.obs import metrics
from a2a_continue.runtime.db import Record
from a2a_continue.runtime.gateway import Gateway

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255

# Refusals made of the agent's own answer: kept and replayed like an answer.
KEPT_REFUSALS: tuple[type[AppError], ...] = (NotCancelable, AgentError, AgentStartedNoTask)


class InvalidKey(AppError):
    status, slug, title = 422, "invalid-idempotency-key", "Invalid Idempotency-Key header"

    def __init__(self, msg: str) -> None:
        super().__init__(f"{HEADER} {msg}", errors=[{"loc": f"$.headers.{HEADER}", "msg": msg}])


class KeyReused(AppError):
    status, slug, title = 422, "idempotency-key-reused", "Idempotency-Key used for another request"


class KeyInFlight(AppError):
    status, slug, title = 409, "idempotency-key-in-flight", "A request with this key is in flight"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.headers["Retry-After"] = "1"


class KeyStreamed(AppError):
    status, slug, title = 409, "idempotency-key-streamed", "The answer to this key was streamed"


class Replayed(Exception):
    """The key already has an answer: send it again instead of doing anything."""

    def __init__(self, response: Response) -> None:
        super().__init__("replayed")
        self.response = response


def key_from(headers: Headers) -> str | None:
    """Return the request's key (None without one); refuse a malformed one with 422."""
    values = headers.getlist(HEADER)
    if not values:
        return None
    if len(values) > 1:
        raise InvalidKey("must be sent once")
    return check_key(values[0])


def check_key(key: str) -> str:
    """Return ``key`` if it is 1 to 255 printable ASCII characters; raise 422 otherwise."""
    if not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidKey(f"must be 1 to {MAX_KEY_LENGTH} characters long")
    if not all(" " <= c <= "~" for c in key):
        raise InvalidKey("must be printable ASCII")
    return key


def message_key(message_id: str) -> str:
    """The key a client's messageId stands for: itself, or its digest when it is no valid key.

    A2A lets a messageId be any string; a key is printable ASCII of bounded length.
    """
    try:
        return check_key(message_id)
    except InvalidKey:
        return "sha256:" + hashlib.sha256(message_id.encode()).hexdigest()


def request_hash(method: str, path: str, body: bytes) -> bytes:
    """Fingerprint a request: the same key may only ever stand for one of them."""
    return hashlib.sha256(b"\0".join((method.encode(), path.encode(), body))).digest()


# ---- one request's key --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyRequest:
    """A key and the request it is sent with."""

    caller: str
    key: str
    route: str
    agent_id: uuid.UUID
    request_hash: bytes
    token: uuid.UUID


def replay_of(row: Record) -> Response:
    """Rebuild the stored answer of a key row (columns as the ``idem`` CTE names them)."""
    headers = {"content-type": row["key_content_type"], REPLAYED: "true"}
    if row["key_task_state"] is not None:
        headers["A2A-Task-State"] = row["key_task_state"]
    return Response(bytes(row["key_body"]), status_code=row["key_status"], headers=headers)


def refusal_of(row: Record) -> Exception:
    """Say why a key held by another request cannot be taken (checked in this order)."""
    if not row["key_same"]:
        return KeyReused(
            "this Idempotency-Key was sent with another request (method, path or body); "
            "use a new key for a new request"
        )
    if row["key_streamed"]:
        return streamed(row["key_agent_id"], row["key_stream_task"])
    if row["key_status"] is not None:
        metrics.idempotent_replay()
        return Replayed(replay_of(row))
    return KeyInFlight(
        "a request with this Idempotency-Key is in flight; retry when it has answered"
    )


def streamed(agent_id: uuid.UUID, task_id: str | None) -> KeyStreamed:
    """The refusal of a streamed key: where its task's events are, once the stream named it."""
    detail = "the answer to this key was streamed and is not kept; read the task's events"
    if task_id is None:
        return KeyStreamed(detail + " (the stream has not named its task yet)")
    url = f"/v1/a2a/{agent_id}/tasks/{quote(task_id, safe='')}/events"
    error = KeyStreamed(f"{detail} at {url}", taskId=task_id, eventsUrl=url)
    error.headers["Link"] = f'<{url}>; rel="related"'
    return error


class KeyHold:
    """One request's hold on its key; without a key every method does nothing.

    As an async context manager it takes the key on entry (unless the claim of a follow-up
    takes it) and on exit keeps the answer given to :meth:`keep`, or releases the key.
    """

    def __init__(self, gw: Gateway, request: KeyRequest | None, *, with_claim: bool) -> None:
        self.gw = gw
        self.request = request
        self.with_claim = with_claim
        self.taken = False
        self.streamed = False
        self.kept: Response | None = None
        # The task a streamed answer belongs to, when the request names it (a follow-up).
        self.stream_task: str | None = None

    def param(self) -> dict[str, Any] | None:
        """The jsonb parameter of the ``idem`` CTE (None: no key)."""
        r = self.request
        if r is None:
            return None
        settings = self.gw.settings
        return {
            "key": r.key,
            "route": r.route,
            "hash": r.request_hash.hex(),
            "token": str(r.token),
            "ttl": settings.idempotency_ttl_s,
            "timeout": settings.agent_timeout_s,
            "margin": settings.claim_margin_s,
        }

    def settle(self, row: Record | None) -> None:
        """Read what the ``idem`` CTE returned: go on, or raise the replay or the refusal."""
        if self.request is None:
            return
        if row is None or row["key_mine"] is None:
            raise RuntimeError("the statement did not return the key")
        if not row["key_mine"]:
            raise refusal_of(row)
        self.taken = True

    async def take(self) -> None:
        """Take the key in its own statement, or raise the replay or the refusal."""
        r = self.request
        if r is None:
            return
        async with self.gw.connection() as conn:
            row = await keys.take_key(conn, r.caller, r.agent_id, self.param())
        self.settle(row)

    def keep(self, response: Response) -> Response:
        """Mark ``response`` as the answer to keep for the key; return it."""
        self.kept = response
        return response

    async def mark_streamed(self, task_id: str | None = None) -> None:
        """Record that the answer is streamed (not kept); ``task_id`` once the stream names it.

        Retries of the key then get 409 ``idempotency-key-streamed`` pointing at the task's
        event stream. The streaming path calls it when its stream starts, and again once the
        first frame names the task.
        """
        if self.request is not None and self.taken:
            self.streamed = True
            await self._write(keys.mark_streamed, task_id)

    async def store(self, response: Response) -> None:
        """Keep ``response`` as the key's answer."""
        if self.request is None or not self.taken:
            return
        if not hasattr(response, "body"):
            # A streaming response: its bytes are never all here to keep.
            await self.mark_streamed(self.stream_task)
            return
        await self._write(
            keys.store_answer,
            response.status_code,
            response.headers.get("a2a-task-state"),
            response.headers.get("content-type"),
            bytes(response.body),
        )

    async def release(self) -> None:
        """Let the key go: nothing is kept and a retry goes through."""
        if self.request is not None and self.taken:
            await self._write(keys.release_key)

    async def _write(self, write: Callable[..., Awaitable[None]], *args: Any) -> None:
        r = self.request
        assert r is not None
        try:
            async with self.gw.connection() as conn:
                await write(conn, r.caller, r.key, r.token, *args)
        except Exception:
            # The request's outcome stands; the key stays in flight until its lease ends.
            log.exception("could not update an idempotency key for route %s", r.route)

    async def __aenter__(self) -> KeyHold:
        if not self.with_claim:
            await self.take()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None and self.streamed:
            return  # marked streamed: nothing to keep, and retries go to the events
        if exc is None and self.kept is not None:
            await self.store(self.kept)
        elif isinstance(exc, KEPT_REFUSALS):
            await self.store(problem_response(exc))
        else:
            await self.release()


def idempotent(
    gw: Gateway,
    caller: Caller,
    key: str | None,
    route: str,
    agent_id: uuid.UUID,
    request_hash: bytes,
    *,
    with_claim: bool = False,
) -> KeyHold:
    """Open the hold on a request's key with ``key`` (None: an unkeyed request, nothing happens)."""
    if key is None:
        return KeyHold(gw, None, with_claim=with_claim)
    request = KeyRequest(caller.sub, key, route, agent_id, request_hash, uuid.uuid4())
    return KeyHold(gw, request, with_claim=with_claim)


def for_request(
    request: Request, body: bytes, route: str, *, with_claim: bool = False, answer: str = ""
) -> KeyHold:
    """Open the hold on a REST request's key (its key header, caller, agent and fingerprint;
    an ``answer`` mode other than the agent's body is part of the request it stands for)."""
    key = key_from(request.headers)
    path = request.url.path + (f"?answer={answer}" if answer else "")
    digest = request_hash(request.method, path, body) if key is not None else b""
    state = request.scope["state"]
    held_key = idempotent(
        state["gateway"],
        state["caller"],
        key,
        route,
        request.path_params["agent_id"],
        digest,
        with_claim=with_claim,
    )
    held_key.stream_task = request.path_params.get("task_id")
    return held_key
