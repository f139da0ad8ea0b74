"""The agent's extended card through the façade: asked of the agent with its credentials,
then pointed at the gateway like the public card (SPEC §16)."""

from __future__ import annotations

import logging
from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.downstream import post_rpc
from a2a_continue.core.agents import card_trust
from a2a_continue.core.agents.exchange import agent_target
from a2a_continue.core.agents.registry import visible_agent_row
from a2a_continue.errors import AgentBadAnswer
from a2a_continue.facade import card
from a2a_continue.facade.context import Call
from a2a_continue.facade.errors import UNSUPPORTED_OPERATION, RpcError
from a2a_continue.facade.methods import AgentRpcError
from a2a_continue.facade.signed_card import signed

log = logging.getLogger(__name__)

_METHODS = {"1.0": "GetExtendedAgentCard", "0.3": "agent/getAuthenticatedExtendedCard"}


def _request(version: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": protocol.new_rpc_id(),
        "method": _METHODS[version],
        "params": {},
    }


async def extended_card(call: Call, params: dict[str, Any]) -> object:
    """GetExtendedAgentCard / agent/getAuthenticatedExtendedCard: -32004 unless the agent's
    card declares an extended card; then the agent's (its signatures checked like any card
    fetched), rewritten to the gateway and signed by it."""
    async with call.gw.connection() as conn:
        row = await visible_agent_row(conn, call.caller, call.agent_id)
    if not card.declares_extended_card(row["card"]):
        raise RpcError(UNSUPPORTED_OPERATION, "the agent serves no extended agent card")
    target = agent_target(call.gw, row)
    settings = call.gw.settings
    reply = await post_rpc(
        call.gw.session,
        target,
        _request(target.protocol_version),
        settings.max_agent_response_bytes,
        settings.agent_networks,
    )
    if reply.body.get("error") is not None:
        raise AgentRpcError(reply.body["error"], call.version)
    extended = reply.body.get("result")
    if not isinstance(extended, dict):
        raise AgentBadAnswer("the agent answered its extended card with no card")
    card_url = row["card_url"] or target.endpoint_url
    outcome = await card_trust.check_card(
        call.gw, extended, card_url, row["card_keys"], target.timeout_s
    )
    if card_trust.required(settings, row["require_signed_card"]):
        _refuse_unverified(call, outcome)
    url = card.facade_url(call.base_url, call.agent_id)
    rewritten = card.facade_card(extended, row["name"], url, call.version)
    return await signed(call.gw, rewritten, call.base_url)


def _refuse_unverified(call: Call, outcome: dict[str, Any]) -> None:
    """Under ``require``, an extended card that is not verified is not passed on (502)."""
    if outcome["status"] == card_trust.VERIFIED:
        return
    reason = outcome["reason"] or "no signature"
    log.warning("agent %s: its extended card is %s (%s)", call.agent_id, outcome["status"], reason)
    raise AgentBadAnswer(
        f"the agent's extended card is {outcome['status']} ({reason});"
        " this agent's cards need a verified signature"
    )
