"""The one outbound call: a JSON-RPC POST to an agent, with its credentials and limits."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
from aiohttp import hdrs

from a2a_continue.a2a.netguard import AddressRefused, check_call_url, refused_reason
from a2a_continue.errors import AgentBadAnswer, AgentTimeout, AgentUnreachable
from a2a_continue.limits import MAX_JSON_DEPTH, TooDeep, check_depth
from a2a_continue.obs.telemetry import outbound_headers
from a2a_continue.settings import Network

_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class AgentTarget:
    """Where and how to reach one agent."""

    endpoint_url: str
    protocol_version: str
    timeout_s: float
    auth: dict[str, Any] | None = None
    agent_id: uuid.UUID | None = None
    headers: dict[str, str] = field(default_factory=dict)  # see outbound_headers

    def __post_init__(self) -> None:
        # Built once per target (targets are cached per agent row), not once per call.
        if not self.headers:
            self.headers.update(target_headers(self.protocol_version, self.auth))


@dataclass(frozen=True, slots=True)
class AgentReply:
    """The agent's answer: its exact bytes and their decoded JSON."""

    raw: bytes
    body: Any


def auth_headers(auth: dict[str, Any] | None) -> dict[str, str]:
    """Turn stored credentials into request headers."""
    if not auth:
        return {}
    if auth["type"] == "bearer":
        return {"Authorization": f"Bearer {auth['token']}"}
    if auth["type"] == "basic":
        pair = f"{auth['username']}:{auth['password']}".encode()
        return {"Authorization": f"Basic {base64.b64encode(pair).decode()}"}
    return dict(auth["headers"])


def target_headers(protocol_version: str, auth: dict[str, Any] | None) -> dict[str, str]:
    """The headers of every call to an agent: content type, A2A version, credentials."""
    return {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "A2A-Version": protocol_version,
        **auth_headers(auth),
    }


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """Read the decoded answer, stopping as soon as it passes ``limit`` bytes."""
    # Content-Length counts the bytes on the wire: it bounds the answer only when it is not
    # compressed (a gzip answer of a few KB may inflate to gigabytes).
    if response.content_length is not None and hdrs.CONTENT_ENCODING not in response.headers:
        if response.content_length > limit:
            raise AgentBadAnswer(f"the agent's answer is larger than {limit} bytes")
        return await response.read()
    chunks: list[bytes] = []
    size = 0
    while chunk := await response.content.read(_CHUNK):
        size += len(chunk)
        if size > limit:
            raise AgentBadAnswer(f"the agent's answer is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class AgentAddressRefused(AgentUnreachable):
    slug, title = "agent-address-refused", "The agent's address is not one the gateway calls"


def call_headers(target: AgentTarget, networks: Sequence[Network]) -> dict[str, str]:
    """Check the agent's address for this call; return the headers to send with it.

    The session's resolver refuses names that resolve to guarded addresses; literal
    addresses are checked here, since aiohttp does not resolve them.
    """
    try:
        check_call_url(target.endpoint_url, networks)
    except AddressRefused as exc:
        raise AgentAddressRefused(f"the agent's address is refused: {exc}") from None
    return {**target.headers, **outbound_headers()}


async def post_rpc(
    session: aiohttp.ClientSession,
    target: AgentTarget,
    payload: dict[str, Any],
    max_bytes: int,
    networks: Sequence[Network] = (),
) -> AgentReply:
    """POST ``payload`` to the agent and return its JSON-RPC answer, or raise 502/504 errors."""
    headers = call_headers(target, networks)
    try:
        async with (
            asyncio.timeout(target.timeout_s),
            session.post(
                target.endpoint_url,
                data=msgspec.json.encode(payload),
                headers=headers,
                allow_redirects=False,
            ) as response,
        ):
            raw = await _read_capped(response, max_bytes)
            status = response.status
    except TimeoutError:
        raise no_answer(target) from None
    except aiohttp.ClientError as exc:
        raise call_failed(exc) from None
    if not 200 <= status < 300:
        raise AgentBadAnswer(f"the agent answered with HTTP {status}")
    return AgentReply(raw=raw, body=decode_rpc(raw, payload["id"], "the agent's answer"))


def no_answer(target: AgentTarget) -> AgentTimeout:
    """The error of an agent that did not answer a call within its timeout."""
    return AgentTimeout(f"the agent did not answer within {target.timeout_s:g} s")


def call_failed(exc: aiohttp.ClientError) -> AgentUnreachable:
    """The error of a call whose connection failed: a refused address, else unreachable."""
    reason = refused_reason(exc)
    if reason is not None:
        return AgentAddressRefused(f"the agent's address is refused: {reason}")
    # The exception text may carry request details; name only its kind.
    return AgentUnreachable(f"the agent could not be reached ({type(exc).__name__})")


def decode_rpc(raw: bytes, rpc_id: str, what: str) -> Any:
    """Decode a JSON-RPC object of the agent's answering ``rpc_id``; ``what`` names it."""
    try:
        check_depth(raw)
    except TooDeep:
        raise AgentBadAnswer(f"{what} nests deeper than {MAX_JSON_DEPTH} levels") from None
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise AgentBadAnswer(f"{what} is not JSON") from None
    if not isinstance(body, dict):
        raise AgentBadAnswer(f"{what} is not a JSON-RPC object")
    answered = body.get("id")
    if answered != rpc_id and not (answered is None and "error" in body):
        raise AgentBadAnswer(f"{what} carries another JSON-RPC id")
    return body
