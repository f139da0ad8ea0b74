"""The agent card the gateway serves for an agent: the agent's own, pointed at the gateway."""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.core.callers import AGENT_VISIBLE, Caller
from a2a_continue.errors import NotFound
from a2a_continue.runtime.db import Conn, Record

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

SELECT_CARD = f"""
SELECT a.id, a.name, a.card FROM a2a_agents a WHERE a.id = $4 AND {AGENT_VISIBLE}
"""


def facade_url(base_url: str, agent_id: uuid.UUID) -> str:
    """Return the gateway's JSON-RPC endpoint for one agent."""
    return f"{base_url.rstrip('/')}/a2a/{agent_id}"


def _security() -> JSON:
    # One scheme object in both versions' shapes: 0.3 reads `type`/`scheme`, 1.0 reads the
    # `httpAuthSecurityScheme` member; each ignores the other's members.
    bearer = {"scheme": "bearer", "bearerFormat": "JWT"}
    scheme = {
        "type": "http",
        **bearer,
        "description": "A bearer JWT of the gateway",
        "httpAuthSecurityScheme": {**bearer, "description": "A bearer JWT of the gateway"},
    }
    return {
        "securitySchemes": {SCHEME: scheme},
        "security": [{SCHEME: []}],
        "securityRequirements": [{"schemes": {SCHEME: {"list": []}}}],
    }


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


def facade_card(source: JSON | None, name: str, url: str) -> JSON:
    """Build the card A2A clients see: the agent's description, the gateway's endpoints."""
    base = source if isinstance(source, dict) else synthesized_card(name)
    card = {k: v for k, v in base.items() if k not in _REPLACED}
    card.setdefault("name", name)
    card.setdefault("description", "")
    card.setdefault("version", "1.0.0")
    card.setdefault("defaultInputModes", ["text/plain"])
    card.setdefault("defaultOutputModes", ["text/plain"])
    card["skills"] = _skills(base.get("skills"))
    capabilities = base.get("capabilities")
    card["capabilities"] = {
        **(capabilities if isinstance(capabilities, dict) else {}),
        # §8.2's fallback streams for every agent; push comes from the gateway's event log.
        "streaming": True,
        "pushNotifications": True,
        "extendedAgentCard": False,
    }
    card["supportedInterfaces"] = [
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": version}
        for version in ("1.0", "0.3")
    ]
    # The 0.3 description of the same endpoint.
    card["url"] = url
    card["preferredTransport"] = "JSONRPC"
    card["protocolVersion"] = "0.3.0"
    card["additionalInterfaces"] = [{"url": url, "transport": "JSONRPC"}]
    card.update(_security())
    return card


async def card_for(conn: Conn, caller: Caller, agent_id: uuid.UUID, base_url: str) -> JSON:
    """Return the façade card of a visible agent, or raise 404."""
    row: Record | None = await conn.fetchrow(SELECT_CARD, *caller.scope_args(), agent_id)
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return facade_card(row["card"], row["name"], facade_url(base_url, agent_id))
