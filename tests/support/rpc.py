"""JSON-RPC calls straight to an agent, in either protocol version."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp

JSON = dict[str, Any]


async def rpc(http: aiohttp.ClientSession, url: str, method: str, params: JSON) -> JSON:
    """Call ``method`` on the agent, with the A2A-Version header its name implies."""
    version = "0.3" if "/" in method else "1.0"
    body = {"jsonrpc": "2.0", "id": "req-1", "method": method, "params": params}
    async with http.post(url, json=body, headers={"A2A-Version": version}) as response:
        assert response.status == 200
        answer: JSON = await response.json()
    assert answer["id"] == "req-1"
    return answer


def message_v10(text: str, task_id: str | None = None) -> JSON:
    """Params of a 1.0 send."""
    message: JSON = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id:
        message["taskId"] = task_id
    return {"message": message}


def message_v03(text: str, task_id: str | None = None) -> JSON:
    """Params of a 0.3 send."""
    message: JSON = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    if task_id:
        message["taskId"] = task_id
    return {"message": message}
