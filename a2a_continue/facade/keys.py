"""Safe retries through the façade (SPEC §10): a send's key is its Idempotency-Key header,
else the client's messageId; a cancel's is the header.

A façade request is known by its JSON-RPC method and params, not its bytes: a client that
retries gives the request a new JSON-RPC id. What is kept is what the REST routes keep (the
agent's answer, or the cancelled task), so a replay is translated again for the retrying
client and carries its id.
"""

from __future__ import annotations

from typing import Any

import msgspec

from a2a_continue.core.idempotency.retries import (
    KeyHold,
    check_key,
    idempotent,
    message_key,
    request_hash,
)
from a2a_continue.facade.context import Call


def key_of(header: str | None, params: dict[str, Any]) -> str | None:
    """The call's key: the Idempotency-Key header (checked when used), else the messageId."""
    if header is not None:
        return header
    message = params.get("message")
    message_id = message.get("messageId") if isinstance(message, dict) else None
    return message_key(message_id) if isinstance(message_id, str) and message_id else None


def hold_for(call: Call, params: dict[str, Any], *, with_claim: bool = False) -> KeyHold:
    """Open the hold on the key of one send or cancel (no key: a hold that does nothing)."""
    key = call.idempotency_key
    digest = b""
    if key is not None:
        key = check_key(key)  # a messageId's key always passes; a bad header is refused
        digest = request_hash(call.method, f"/a2a/{call.agent_id}", msgspec.json.encode(params))
    return idempotent(
        call.gw, call.caller, key, "a2a", call.agent_id, digest, with_claim=with_claim
    )
