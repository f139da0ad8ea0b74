"""The façade's routes: each agent's card and its JSON-RPC endpoint at the gateway."""

from __future__ import annotations

from a2a_continue.facade import handlers, http_json, rpc
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


_STREAMED = "the method's frames in the binding's shape; an error ends the stream as `event: error`"


def _message_10(message_id: str) -> JSON:
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": QUESTION}]}
    return {"message": message}


def _message_03(message_id: str) -> JSON:
    message = {"messageId": message_id, "role": "ROLE_USER", "content": [{"text": QUESTION}]}
    return {"message": message}


# The documented body of each binding route that reads one: (schema, example, optional).
_SEND_10: JSON = {"type": "object", "description": "a SendMessageRequest (A2A 1.0 JSON)"}
_SEND_03: JSON = {"type": "object", "description": "a SendMessageRequest (A2A 0.3 protobuf JSON)"}
_CANCEL: JSON = {"type": "object", "description": "empty, or `metadata`"}
_BODIES: dict[str, tuple[JSON, JSON, bool]] = {
    "SendMessage": (_SEND_10, _message_10("example-rest-1"), False),
    "SendStreamingMessage": (_SEND_10, _message_10("example-rest-2"), False),
    "message/send": (_SEND_03, _message_03("example-rest03-1"), False),
    "message/stream": (_SEND_03, _message_03("example-rest03-2"), False),
    "CancelTask": (_CANCEL, {}, True),
    "tasks/cancel": (_CANCEL, {}, True),
}


def _binding_route(
    method: str, path: str, binding: http_json.Binding, name: str, doc: str
) -> ApiRoute:
    spec = rpc.METHODS[binding.method]
    streams = spec.frames is not None
    summary = f"A2A {spec.version} HTTP+JSON: {doc}"
    body, example, optional = _BODIES.get(binding.method, (None, None, False))
    return ApiRoute(
        method,
        FACADE + path,
        http_json.endpoint(binding, name, f"The agent's {doc[:-1]} through the gateway."),
        spec.permission,
        Operation(
            summary,
            body=body,
            body_optional=optional,
            example=example,
            answer="the A2A answer in the binding's JSON; errors as the binding defines them"
            " (1.0: a google.rpc.Status JSON; 0.3: code, type, message, data)",
            problems=(404,),
            sse=_STREAMED if streams else None,
        ),
    )


# The HTTP+JSON binding: 1.0 under the agent, 0.3 under its /v1 (SPEC §16).
ROUTES += [_binding_route(*entry) for entry in (*http_json.V10, *http_json.V03)]
