"""A2A clients of the façade: the official a2a-sdk client, and raw JSON-RPC in either version."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client as SdkClient
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, StreamResponse

from tests.support.client import Client, Response, token

JSON = dict[str, Any]


def card_base(gateway_url: str, agent_id: str) -> str:
    """The URL an A2A client is given: the agent at the gateway."""
    return f"{gateway_url}/a2a/{agent_id}"


@contextlib.asynccontextmanager
async def sdk_client(
    gateway_url: str,
    agent_id: str,
    *,
    version: str = "1.0",
    streaming: bool = False,
    bearer: str | None = None,
    binding: str = "JSONRPC",
) -> AsyncIterator[SdkClient]:
    """An a2a-sdk client made from the gateway's card URL with a bearer token.

    ``version`` "0.3" keeps only the card's 0.3 interfaces, so the SDK picks its 0.3
    compatibility transport (the one a 0.3 client would use); ``binding`` is the one
    protocol binding the client may choose ("JSONRPC" or "HTTP+JSON").
    """
    headers = {"Authorization": f"Bearer {bearer or token()}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        config = ClientConfig(
            httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]
        )
        factory = ClientFactory(config)
        client = await factory.create_from_url(card_base(gateway_url, agent_id))
        if version == "0.3":
            card = client._card
            keep = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(keep)
            await client.close()
            client = factory.create(card)
        try:
            yield client
        finally:
            await client.close()


def user_message(
    text: str, task_id: str | None = None, context_id: str | None = None
) -> SendMessageRequest:
    """A send request with one text part, as an SDK user writes it."""
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    if task_id:
        message.task_id = task_id
    if context_id:
        message.context_id = context_id
    return SendMessageRequest(message=message)


async def send_all(client: SdkClient, request: SendMessageRequest) -> list[StreamResponse]:
    """Send and collect every response the SDK yields."""
    return [event async for event in client.send_message(request)]


async def rpc(
    client: Client,
    agent_id: str,
    method: str,
    params: Any,
    *,
    version: str | None = None,
    rpc_id: Any = "req-1",
    bearer: str | None = "",
) -> Response:
    """POST one raw JSON-RPC request to the façade (A2A-Version header when given)."""
    headers = {"A2A-Version": version} if version else {}
    body = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
    return await client.call("POST", f"/a2a/{agent_id}", body, headers=headers, bearer=bearer)
