"""The façade over each binding and version: one send, one read, and a refusal read back as
the JSON-RPC code it stands for (HTTP+JSON errors carry the A2A reason, or the 0.3 code)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from a2a_continue.facade.errors import REASONS
from tests.support.client import Client, Response
from tests.support.facade_clients import rpc

__all__ = ["rpc"]

JSON = dict[str, Any]

JSONRPC, REST = "JSONRPC", "HTTP+JSON"
# (binding, version): every way an A2A client reaches the façade.
ALL = [(JSONRPC, "1.0"), (JSONRPC, "0.3"), (REST, "1.0"), (REST, "0.3")]
IDS = ["jsonrpc-1.0", "jsonrpc-0.3", "rest-1.0", "rest-0.3"]
CODES = {reason: code for code, reason in REASONS.items()}
BEARER = {"scheme": "bearer", "bearerFormat": "JWT", "description": "A bearer JWT of the gateway"}


def message(binding: str, version: str, text: str, task_id: str | None = None) -> JSON:
    """A user message as the binding and version write it."""
    out: JSON
    if version == "1.0":
        out = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    elif binding == JSONRPC:
        parts = [{"kind": "text", "text": text}]
        out = {"kind": "message", "messageId": str(uuid.uuid4()), "role": "user", "parts": parts}
    else:  # 0.3 HTTP+JSON: the protobuf JSON
        out = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "content": [{"text": text}]}
    if task_id:
        out["taskId"] = task_id
    return out


def parts_field(binding: str, version: str) -> str:
    """What the binding calls a message's parts."""
    return "content" if (binding, version) == (REST, "0.3") else "parts"


_PATHS = {"1.0": "", "0.3": "/v1"}
_NAMES = {
    ("send", "1.0"): "SendMessage",
    ("send", "0.3"): "message/send",
    ("get", "1.0"): "GetTask",
    ("get", "0.3"): "tasks/get",
    ("cancel", "1.0"): "CancelTask",
    ("cancel", "0.3"): "tasks/cancel",
    ("card", "1.0"): "GetExtendedAgentCard",
    ("card", "0.3"): "agent/getAuthenticatedExtendedCard",
}


async def send(
    client: Client, agent_id: str, binding: str, version: str, msg: JSON, **extra: Any
) -> Response:
    """Send ``msg`` (no configuration unless given in ``extra``)."""
    params = {"message": msg, **extra}
    if binding == JSONRPC:
        return await rpc(client, agent_id, _NAMES["send", version], params, version=version)
    return await client.call("POST", f"/a2a/{agent_id}{_PATHS[version]}/message:send", params)


async def get(
    client: Client, agent_id: str, binding: str, version: str, task_id: str, **query: Any
) -> Response:
    """GetTask / tasks/get (``historyLength`` and the like in ``query``)."""
    if binding == JSONRPC:
        params = {"id": task_id, **query}
        return await rpc(client, agent_id, _NAMES["get", version], params, version=version)
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    path = f"/a2a/{agent_id}{_PATHS[version]}/tasks/{task_id}" + (f"?{qs}" if qs else "")
    return await client.call("GET", path)


async def cancel(
    client: Client, agent_id: str, binding: str, version: str, task_id: str
) -> Response:
    """CancelTask / tasks/cancel."""
    if binding == JSONRPC:
        params = {"id": task_id}
        return await rpc(client, agent_id, _NAMES["cancel", version], params, version=version)
    return await client.call("POST", f"/a2a/{agent_id}{_PATHS[version]}/tasks/{task_id}:cancel", {})


async def extended_card(client: Client, agent_id: str, binding: str, version: str) -> Response:
    """GetExtendedAgentCard / agent/getAuthenticatedExtendedCard (0.3 REST: GET /v1/card)."""
    if binding == JSONRPC:
        return await rpc(client, agent_id, _NAMES["card", version], {}, version=version)
    path = "/extendedAgentCard" if version == "1.0" else "/v1/card"
    return await client.call("GET", f"/a2a/{agent_id}{path}")


@dataclass(frozen=True)
class Refusal:
    """A refusal of any binding: the JSON-RPC code it stands for, its message, its members."""

    code: int
    message: str
    members: JSON
    http_status: int


def refusal(r: Response, binding: str, version: str) -> Refusal:
    """Read a refusal; JSON-RPC answers it with HTTP 200, HTTP+JSON with an error status."""
    body = r.json()
    if binding == JSONRPC:
        assert r.status == 200, r.raw
        error = body["error"]
        data = error.get("data")
        members = data if isinstance(data, dict) else (data[0]["metadata"] if data else {})
        return Refusal(error["code"], error["message"], members, r.status)
    assert r.status >= 400, r.raw
    assert r.headers["Content-Type"].startswith("application/json")
    if version == "0.3":
        return Refusal(body["code"], body["message"], body.get("data", {}), r.status)
    error = body["error"]
    assert error["code"] == r.status
    [info] = [d for d in error["details"] if d["@type"].endswith("google.rpc.ErrorInfo")]
    assert info["domain"] == "a2a-protocol.org"
    return Refusal(CODES[info["reason"]], error["message"], info["metadata"], r.status)


def result(r: Response, binding: str, version: str) -> Any:
    """The answer of a call that succeeded (JSON-RPC: its result)."""
    assert r.status == 200, r.raw
    body = r.json()
    if binding == JSONRPC:
        assert "error" not in body, r.raw
        return body["result"]
    return body
