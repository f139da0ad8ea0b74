"""The sample agent's card, in the 1.0 or the 0.3 shape."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

CARD_PATH = "/.well-known/agent-card.json"
_DESCRIPTION = "Asks which city, then gives that city's forecast."
_SKILL: JSON = {
    "id": "forecast",
    "name": "Forecast",
    "description": "Gives the weather for a city.",
    "tags": ["weather"],
    "examples": ["Paris"],
}


def sample_card(endpoint: str, protocol: str = "1.0") -> JSON:
    """The agent card for an agent answering at ``endpoint``, in the ``protocol`` card shape.

    A 1.0 card lists its JSON-RPC interfaces in ``supportedInterfaces`` (1.0 first; the agent
    also answers 0.3 methods); a 0.3 card names its endpoint in ``url`` with
    ``preferredTransport: JSONRPC``.
    """
    common: JSON = {
        "name": "Sample weather agent",
        "description": _DESCRIPTION,
        "version": "1.0.0",
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [_SKILL],
    }
    if protocol == "0.3":
        return {
            "protocolVersion": "0.3.0",
            **common,
            "url": endpoint,
            "preferredTransport": "JSONRPC",
        }
    interfaces = [
        {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": version}
        for version in ("1.0", "0.3")
    ]
    return {**common, "supportedInterfaces": interfaces}
