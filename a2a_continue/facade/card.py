"""The agent card the gateway serves for an agent: the agent's own, pointed at the gateway."""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.core.access.callers import ANONYMOUS, Caller
from a2a_continue.core.agents.cards import visible_card_row
from a2a_continue.errors import NotFound, Unauthorized
from a2a_continue.runtime.db import Conn

JSON = dict[str, Any]

SCHEME = "bearer"

# Members of an agent's card that describe how to reach or trust the agent itself: the
# gateway replaces them with its own.
_REPLACED = frozenset(
    {
        "url",
        "preferredTransport",
        "protocolVersion",
        "additionalInterfaces",
        "supportedInterfaces",
        "securitySchemes",
        "security",
        "securityRequirements",
        "signatures",
        "supportsAuthenticatedExtendedCard",
    }
)


def facade_url(base_url: str, agent_id: uuid.UUID) -> str:
    """Return the gateway's JSON-RPC endpoint for one agent."""
    return f"{base_url.rstrip('/')}/a2a/{agent_id}"


BEARER = {"scheme": "bearer", "bearerFormat": "JWT", "description": "A bearer JWT of the gateway"}

# The card's members only one version reads; a card asked for in one version drops the other's.
_V10_ONLY = ("supportedInterfaces", "securityRequirements")
_V03_ONLY = ("url", "preferredTransport", "protocolVersion", "additionalInterfaces", "security")

# The façade's bindings, JSON-RPC first (A2A's names in 1.0 and in 0.3).
BINDINGS = ("JSONRPC", "HTTP+JSON")


def _security(version: str | None) -> JSON:
    """The gateway's bearer scheme, in one version's shape: 1.0 the one-of object, 0.3 (and a
    card asked for in no version, which 0.3 clients read too) ``type``/``scheme``."""
    if version == "1.0":
        scheme: JSON = {"httpAuthSecurityScheme": dict(BEARER)}
    else:
        scheme = {"type": "http", **BEARER}
    return {
        "securitySchemes": {SCHEME: scheme},
        "security": [{SCHEME: []}],
        "securityRequirements": [{"schemes": {SCHEME: {"list": []}}}],
    }


def declares_extended_card(card: object) -> bool:
    """Tell whether an agent's card says the agent serves an extended card (either version)."""
    if not isinstance(card, dict):
        return False
    capabilities = card.get("capabilities")
    extended = isinstance(capabilities, dict) and capabilities.get("extendedAgentCard") is True
    return extended or card.get("supportsAuthenticatedExtendedCard") is True


def _skills(raw: object) -> list[Any]:
    if not isinstance(raw, list):
        return []
    # A skill's own security requirements name the agent's schemes, which the gateway drops.
    return [
        {k: v for k, v in skill.items() if k not in ("security", "securityRequirements")}
        if isinstance(skill, dict)
        else skill
        for skill in raw
    ]


def synthesized_card(name: str) -> JSON:
    """Describe an agent registered without a card, from its registration."""
    return {
        "name": name,
        "description": f"The agent {name!r}, reached through the a2a_continue gateway.",
        "version": "1.0.0",
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }


def facade_card(source: JSON | None, name: str, url: str, version: str | None = None) -> JSON:
    """Build the card A2A clients see: the agent's description, the gateway's endpoints.

    ``version`` "1.0" or "0.3" gives that version's card only; None gives the card both
    versions read (0.3's ``securitySchemes`` shape, which 1.0 clients also accept).
    """
    base = source if isinstance(source, dict) else synthesized_card(name)
    card = {k: v for k, v in base.items() if k not in _REPLACED}
    card.setdefault("name", name)
    card.setdefault("description", "")
    card.setdefault("version", "1.0.0")
    card.setdefault("defaultInputModes", ["text/plain"])
    card.setdefault("defaultOutputModes", ["text/plain"])
    card["skills"] = _skills(base.get("skills"))
    capabilities = base.get("capabilities")
    extended = declares_extended_card(base)
    card["capabilities"] = {
        **(capabilities if isinstance(capabilities, dict) else {}),
        # §8.2's fallback streams for every agent; push comes from the gateway's event log.
        "streaming": True,
        "pushNotifications": True,
        "extendedAgentCard": extended,
    }
    card["supportedInterfaces"] = [
        {"url": url, "protocolBinding": binding, "protocolVersion": v}
        for v in ("1.0", "0.3")
        for binding in BINDINGS
    ]
    # The 0.3 description of the same endpoints.
    card["url"] = url
    card["preferredTransport"] = "JSONRPC"
    card["protocolVersion"] = "0.3.0"
    card["additionalInterfaces"] = [{"url": url, "transport": binding} for binding in BINDINGS]
    card.update(_security(version))
    if version == "1.0":
        for member in _V03_ONLY:
            card.pop(member, None)
    elif extended:
        card["supportsAuthenticatedExtendedCard"] = True
    if version == "0.3":
        for member in _V10_ONLY:
            card.pop(member, None)
        card["capabilities"].pop("extendedAgentCard", None)
    return card


async def card_for(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, base_url: str, version: str | None = None
) -> JSON:
    """Return the façade card of a visible agent, or raise 404 (401 to a caller without a
    token, who sees public agents only: nothing else is told apart from a missing agent)."""
    row = await visible_card_row(conn, caller, agent_id)
    if row is None:
        if caller is ANONYMOUS:
            raise Unauthorized("an Authorization: Bearer token is required")
        raise NotFound(f"agent {agent_id} not found")
    return facade_card(row["card"], row["name"], facade_url(base_url, agent_id), version)
