"""The façade's routes: each agent's card and its JSON-RPC endpoint at the gateway."""

from __future__ import annotations

from a2a_continue.facade import handlers
from a2a_continue.http.rest import QUESTION
from a2a_continue.http.routes import JSON, PER_METHOD, ApiRoute, Operation

FACADE = "/a2a/{agent_id:uuid}"

_JSON_RPC: JSON = {
    "type": "object",
    "description": "a JSON-RPC 2.0 request, in A2A 1.0 or 0.3 names (`SendMessage`,"
    " `message/send`, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`, …)",
    "required": ["jsonrpc", "method"],
}

ROUTES = [
    ApiRoute(
        "GET",
        FACADE + "/.well-known/agent-card.json",
        handlers.agent_card,
        "a2a.read",
        Operation(
            "Serve the agent's card, pointed at the gateway.",
            answer="the card: `A2A-Version` 1.0 or 0.3 (header or query) asks for that"
            " version's card only",
        ),
        anonymous=True,
    ),
    ApiRoute(
        "POST",
        FACADE,
        handlers.agent_rpc,  # checks a2a.invoke or a2a.read once it knows the method
        PER_METHOD,
        Operation(
            "The agent's A2A JSON-RPC endpoint at the gateway (for A2A clients)",
            body=_JSON_RPC,
            answer="the JSON-RPC answer, HTTP 200 for JSON-RPC errors too",
            problems=(404, 413),
            example={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "messageId": "example-1",
                        "role": "ROLE_USER",
                        "parts": [{"text": QUESTION}],
                    }
                },
            },
        ),
    ),
]
