"""The context of one JSON-RPC call to the façade, read by its methods and its safe retries."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from a2a_continue.core.access.callers import Caller
from a2a_continue.runtime.gateway import Gateway


@dataclass(frozen=True, slots=True)
class Call:
    """One JSON-RPC call to the façade: who, to which agent, in which version."""

    gw: Gateway
    caller: Caller
    agent_id: uuid.UUID
    version: str
    method: str
    # The key a retried send is recognised by (Idempotency-Key header, else the client's
    # messageId, as SPEC §10 allows); the idempotency layer reads it here.
    idempotency_key: str | None = None
    # The gateway's base URL as the client reaches it (the cards the façade serves name it).
    base_url: str = ""
