"""Registering an agent from its agent card: fetch the card, pick its JSON-RPC interface."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
import msgspec
from msgspec import UNSET

from a2a_continue.a2a.downstream import auth_headers
from a2a_continue.a2a.netguard import (
    AddressRefused,
    check_call_url,
    refused_reason,
    url_host,
    urlsplit_checked,
)
from a2a_continue.core.access.callers import AGENT_VISIBLE, Caller
from a2a_continue.core.agents import card_trust
from a2a_continue.core.agents.card_trust import FetchedCard
from a2a_continue.core.agents.models import (
    AgentAuth,
    AgentCreate,
    AgentPatch,
    Capabilities,
    CardKeys,
)
from a2a_continue.core.agents.registry import visible_agent_row
from a2a_continue.errors import Forbidden, Invalid
from a2a_continue.limits import MAX_JSON_DEPTH, TooDeep, check_depth
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.settings import Network

log = logging.getLogger(__name__)

JSON = dict[str, Any]

CARD_PATH = "/.well-known/agent-card.json"
MAX_CARD_BYTES = 1024 * 1024
NAME_MAX = 200
_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class CardFacts:
    """What a registration takes from an agent card."""

    endpoint_url: str
    protocol_version: str
    name: str | None
    capabilities: Capabilities
    card: JSON
    url: str


def _refuse(msg: str) -> Invalid:
    return Invalid([{"loc": "$.cardUrl", "msg": msg}])


def card_location(url: str) -> str:
    """The card's URL: ``url`` itself when it names a card, else ``url`` + the well-known path.

    A URL names a card when its path ends in ``.json`` or passes through ``/.well-known/``.
    """
    try:
        parts = urlsplit_checked(url)
    except ValueError as exc:
        raise _refuse(f"is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refuse("must be an absolute http(s) URL")
    try:
        url_host(url)  # the host as the fetch reads it; its address is judged by the fetch
    except ValueError as exc:
        raise _refuse(f"is not a valid URL ({exc})") from None
    if parts.username or parts.password:
        raise _refuse("must not carry credentials; put them in 'auth'")
    if parts.path.endswith(".json") or "/.well-known/" in parts.path:
        return url
    return parts._replace(path=parts.path.rstrip("/") + CARD_PATH).geturl()


async def fetch_card(
    session: aiohttp.ClientSession,
    url: str,
    auth: JSON | None,
    timeout_s: float,
    networks: Sequence[Network] = (),
) -> Any:
    """GET the card at ``url`` with the agent's credentials; refuse with a 422 saying why."""
    headers = {"Accept": "application/json", **auth_headers(auth)}
    fetch = f"the agent card could not be fetched from {url}"
    try:
        check_call_url(url, networks)
        async with (
            asyncio.timeout(timeout_s),
            session.get(url, headers=headers, allow_redirects=False) as response,
        ):
            if not 200 <= response.status < 300:
                raise _refuse(f"{fetch}: it answered HTTP {response.status}")
            raw = await _read_capped(response, fetch)
    except TimeoutError:
        raise _refuse(f"{fetch}: no answer within {timeout_s:g} s") from None
    except AddressRefused as exc:
        raise _refuse(f"{fetch}: its address is refused ({exc})") from None
    except aiohttp.ClientError as exc:
        reason = refused_reason(exc)
        if reason is not None:
            raise _refuse(f"{fetch}: its address is refused ({reason})") from None
        # The exception text may carry request details; name only its kind.
        raise _refuse(f"{fetch}: connection failed ({type(exc).__name__})") from None
    try:
        check_depth(raw)
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise _refuse(f"the agent card at {url} is not JSON") from None
    except TooDeep:
        too_deep = f"the agent card at {url} nests deeper than {MAX_JSON_DEPTH} levels"
        raise _refuse(too_deep) from None


async def _read_capped(response: aiohttp.ClientResponse, fetch: str) -> bytes:
    too_large = f"{fetch}: it is larger than {MAX_CARD_BYTES} bytes"
    if response.content_length is not None and response.content_length > MAX_CARD_BYTES:
        raise _refuse(too_large)
    chunks: list[bytes] = []
    size = 0
    while chunk := await response.content.read(_CHUNK):
        size += len(chunk)
        if size > MAX_CARD_BYTES:
            raise _refuse(too_large)
        chunks.append(chunk)
    return b"".join(chunks)


def _version(declared: object, default: str) -> str | None:
    """Map an interface's protocolVersion to the wire the gateway speaks, or None."""
    if declared is None or declared == "":
        return default
    text = str(declared)
    if text == "1" or text.startswith("1."):
        return "1.0"
    if text.startswith(("0.3", "0.2")):
        return "0.3"
    return None


def _usable(url: object, card_url: str) -> str | None:
    if not isinstance(url, str) or not url:
        return None
    absolute = urljoin(card_url, url)
    parts = urlsplit(absolute)
    ok = parts.scheme in ("http", "https") and parts.hostname
    return absolute if ok else None


def pick_interface(card: JSON, card_url: str) -> tuple[str, str] | None:
    """The card's JSON-RPC endpoint and version: 1.0 ``supportedInterfaces`` first, then 0.3.

    Among ``supportedInterfaces``, a JSON-RPC interface of version 1.x wins over one of 0.3;
    without any, a 0.3 card's ``url`` (when its ``preferredTransport`` is JSON-RPC, the 0.3
    default) or its first JSON-RPC ``additionalInterfaces`` entry is used.
    """
    found: dict[str, str] = {}
    interfaces = card.get("supportedInterfaces")
    for entry in interfaces if isinstance(interfaces, list) else []:
        if not isinstance(entry, dict) or str(entry.get("protocolBinding", "")).upper() != (
            "JSONRPC"
        ):
            continue
        version = _version(entry.get("protocolVersion"), "1.0")
        url = _usable(entry.get("url"), card_url)
        if version is not None and url is not None:
            found.setdefault(version, url)
    for version in ("1.0", "0.3"):
        if version in found:
            return found[version], version
    if str(card.get("preferredTransport") or "JSONRPC").upper() == "JSONRPC":
        url = _usable(card.get("url"), card_url)
        if url is not None:
            return url, "0.3"
    extra = card.get("additionalInterfaces")
    for entry in extra if isinstance(extra, list) else []:
        if isinstance(entry, dict) and str(entry.get("transport", "")).upper() == "JSONRPC":
            url = _usable(entry.get("url"), card_url)
            if url is not None:
                return url, "0.3"
    return None


def _capabilities(card: JSON) -> Capabilities:
    declared = card.get("capabilities")
    declared = declared if isinstance(declared, dict) else {}
    return Capabilities(
        streaming=declared.get("streaming") is True,
        push_notifications=declared.get("pushNotifications") is True,
    )


def read_card(card: Any, card_url: str) -> CardFacts:
    """Take what a registration needs from a fetched card; refuse a card without JSON-RPC."""
    if not isinstance(card, dict):
        raise _refuse(f"the agent card at {card_url} is not a JSON object")
    picked = pick_interface(card, card_url)
    if picked is None:
        raise _refuse(f"the agent card at {card_url} offers no JSON-RPC interface (A2A 1.0 or 0.3)")
    name = card.get("name")
    return CardFacts(
        endpoint_url=picked[0],
        protocol_version=picked[1],
        name=name.strip()[:NAME_MAX] or None if isinstance(name, str) else None,
        capabilities=_capabilities(card),
        card=card,
        url=card_url,
    )


async def load_card(gw: Gateway, card_url: str, auth: JSON | None, timeout_s: float) -> CardFacts:
    """Fetch and read the card named by ``card_url`` (a card URL or the agent's base URL)."""
    url = card_location(card_url)
    networks = gw.settings.agent_networks
    return read_card(await fetch_card(gw.session, url, auth, timeout_s, networks), url)


def _auth_dict(auth: AgentAuth | None) -> JSON | None:
    return None if auth is None else msgspec.to_builtins(auth)


async def _fetch_checked(
    gw: Gateway, card_url: str, auth: JSON | None, timeout_s: float, keys: CardKeys | None
) -> tuple[CardFacts, FetchedCard]:
    """Fetch and read a card, then check its signatures with the agent's ``cardKeys``."""
    facts = await load_card(gw, card_url, auth, timeout_s)
    registered = None if keys is None else msgspec.to_builtins(keys)
    outcome = await card_trust.check_card(gw, facts.card, facts.url, registered, timeout_s)
    return facts, FetchedCard(facts.card, facts.url, outcome)


async def resolve_create(gw: Gateway, body: AgentCreate) -> tuple[AgentCreate, FetchedCard | None]:
    """Complete a registration: from its card when it names ``cardUrl`` (its signatures
    checked, and refused under ``require`` unless verified); return the card too."""
    keys = card_trust.check_card_keys(body.card_keys, gw.settings.agent_networks)
    body = msgspec.structs.replace(body, card_keys=keys)
    if body.card_url is None:
        missing = [
            {"loc": f"$.{field}", "msg": "required unless 'cardUrl' is given"}
            for field, value in (
                ("name", body.name),
                ("endpointUrl", body.endpoint_url),
                ("protocolVersion", body.protocol_version),
            )
            if value is None
        ]
        if missing:
            raise Invalid(missing)
        return body, None
    _refuse_with_card(body.endpoint_url, body.protocol_version)
    timeout = body.timeout_seconds or gw.settings.agent_timeout_s
    facts, fetched = await _fetch_checked(gw, body.card_url, _auth_dict(body.auth), timeout, keys)
    must = card_trust.required(gw.settings, body.require_signed_card)
    card_trust.enforce(fetched.signature, must, "registering this agent")
    name = body.name or facts.name
    if name is None:
        raise Invalid([{"loc": "$.name", "msg": "the agent card names no agent; give a name"}])
    return (
        msgspec.structs.replace(
            body,
            name=name,
            endpoint_url=facts.endpoint_url,
            protocol_version=facts.protocol_version,
            capabilities=facts.capabilities,
        ),
        fetched,
    )


def _refuse_with_card(endpoint_url: object, protocol_version: object) -> None:
    clash = [
        {"loc": f"$.{field}", "msg": "give either 'cardUrl' or this, not both"}
        for field, value in (("endpointUrl", endpoint_url), ("protocolVersion", protocol_version))
        if value is not None and value is not UNSET
    ]
    if clash:
        raise Invalid(clash)


def _patched_keys(patch: AgentPatch, row: Any) -> tuple[CardKeys | None, bool]:
    """The ``cardKeys`` and ``requireSignedCard`` a refetched card is checked under."""
    if isinstance(patch.card_keys, CardKeys) or patch.card_keys is None:
        keys = patch.card_keys
    else:
        keys = None if row["card_keys"] is None else msgspec.convert(row["card_keys"], CardKeys)
    flag = patch.require_signed_card
    return keys, (flag if isinstance(flag, bool) else row["require_signed_card"])


async def resolve_patch(
    gw: Gateway, caller: Caller, agent_id: uuid.UUID, patch: AgentPatch
) -> tuple[AgentPatch, FetchedCard | None]:
    """Refetch the card when a change names ``cardUrl``; return the completed change and card.

    Under ``require``, a refetched card that is not verified refuses the whole change (422):
    the stored card and the outcome of its last check stay as they were.
    """
    if isinstance(patch.card_keys, CardKeys):
        keys = card_trust.check_card_keys(patch.card_keys, gw.settings.agent_networks)
        patch = msgspec.structs.replace(patch, card_keys=keys)
    if patch.card_url is UNSET:
        return patch, None
    _refuse_with_card(patch.endpoint_url, patch.protocol_version)
    async with gw.connection() as conn:
        row = await visible_agent_row(conn, caller, agent_id)
    if row["owner"] != caller.sub and not caller.is_admin:
        raise Forbidden("only the agent's owner or an admin may change it")
    if isinstance(patch.auth, AgentAuth) or patch.auth is None:
        auth = _auth_dict(patch.auth)
    else:
        sealed = row["auth_sealed"]
        opened = gw.sealer.open(sealed, row["agent_id"].bytes) if sealed is not None else None
        auth = opened if isinstance(opened, dict) else None
    timeout = patch.timeout_seconds if isinstance(patch.timeout_seconds, float) else None
    timeout = timeout or row["timeout_seconds"] or gw.settings.agent_timeout_s
    keys, flag = _patched_keys(patch, row)
    facts, fetched = await _fetch_checked(gw, patch.card_url, auth, timeout, keys)
    outcome = fetched.signature
    if card_trust.required(gw.settings, flag) and outcome["status"] != card_trust.VERIFIED:
        log.warning(
            "agent %s: the refetched card is %s (%s); the stored card is kept",
            agent_id,
            outcome["status"],
            outcome["reason"] or "no signature",
        )
        card_trust.enforce(outcome, True, "refreshing this agent's card")
    changes: dict[str, Any] = {
        "endpoint_url": facts.endpoint_url,
        "protocol_version": facts.protocol_version,
        "capabilities": facts.capabilities,
    }
    if patch.name is UNSET and facts.name is not None:
        changes["name"] = facts.name
    return msgspec.structs.replace(patch, **changes), fetched


SELECT_CARD = f"""
SELECT a.id, a.name, a.card FROM a2a_agents a WHERE a.id = $4 AND {AGENT_VISIBLE}
"""


async def visible_card_row(conn: Conn, caller: Caller, agent_id: uuid.UUID) -> Record | None:
    """The agent's ``id``, ``name`` and stored ``card``, if the caller may see the agent."""
    row: Record | None = await conn.fetchrow(SELECT_CARD, *caller.scope_args(), agent_id)
    return row
