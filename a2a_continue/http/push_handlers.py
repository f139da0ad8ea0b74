"""REST endpoints of push notifications (SPEC §12): a task's configs, their deliveries, the
gateway's public signing keys."""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import Response

from a2a_continue.core.agents.card_keys import card_signer, published_card_keys
from a2a_continue.core.push import configs as push_configs
from a2a_continue.core.push import deliveries as push_deliveries
from a2a_continue.core.push.keys import published_keys
from a2a_continue.core.shapes.wire import decode_body
from a2a_continue.http.handlers import (
    agent_id_of,
    caller_of,
    gateway_of,
    json_response,
    read_body,
)


def _task_id(request: Request) -> str:
    task_id: str = request.path_params["task_id"]
    return task_id


def _config_id(request: Request) -> str:
    config_id: str = request.path_params["config_id"]
    return config_id


async def create_config(request: Request) -> Response:
    """Create a push config for a visible task."""
    body = decode_body(await read_body(request), push_configs.PushConfigCreate)
    gw = gateway_of(request)
    async with gw.connection() as conn:
        config = await push_configs.create_config(
            conn,
            caller_of(request),
            agent_id_of(request),
            _task_id(request),
            body,
            gw.sealer,
            gw.settings.push_networks,
        )
    created = json_response(config, status=201)
    created.headers["Location"] = f"{request.url.path}/{config.id}"
    return created


async def list_configs(request: Request) -> Response:
    """The push configs of a visible task."""
    async with gateway_of(request).connection() as conn:
        listed = await push_configs.list_configs(
            conn, caller_of(request), agent_id_of(request), _task_id(request)
        )
    return json_response(listed)


async def get_config(request: Request) -> Response:
    """One push config of a visible task."""
    async with gateway_of(request).connection() as conn:
        config = await push_configs.get_config(
            conn, caller_of(request), agent_id_of(request), _task_id(request), _config_id(request)
        )
    return json_response(config)


async def delete_config(request: Request) -> Response:
    """Delete a push config (again: 204 too)."""
    async with gateway_of(request).connection() as conn:
        await push_configs.delete_config(
            conn, caller_of(request), agent_id_of(request), _task_id(request), _config_id(request)
        )
    return Response(status_code=204)


async def list_deliveries(request: Request) -> Response:
    """A config's deliveries, in the order they are sent."""
    async with gateway_of(request).connection() as conn:
        page = await push_deliveries.list_deliveries(
            conn,
            caller_of(request),
            agent_id_of(request),
            _task_id(request),
            _config_id(request),
            request.query_params,
        )
    return json_response(page)


async def redeliver(request: Request) -> Response:
    """Queue a dead or delivered delivery again, under its id."""
    delivery_id: uuid.UUID = request.path_params["delivery_id"]
    async with gateway_of(request).connection() as conn:
        delivery = await push_deliveries.redeliver(
            conn,
            caller_of(request),
            agent_id_of(request),
            _task_id(request),
            _config_id(request),
            delivery_id,
        )
    return json_response(delivery, status=202)


async def jwks(request: Request) -> Response:
    """The public keys push deliveries and façade cards are signed with (no token)."""
    gw = gateway_of(request)
    await card_signer(gw)  # made (or rotated) before it is published
    async with gw.connection() as conn:
        keys = (await published_keys(conn))["keys"] + await published_card_keys(conn)
    unique = list({key["kid"]: key for key in keys}.values())
    response = json_response({"keys": unique})
    response.headers["Cache-Control"] = "public, max-age=300"
    return response
