"""The card-verifying snippet of docs/facade.md runs as written: a2a-sdk's resolver and
verifier accept a card the gateway serves."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.support.client import Client, token
from tests.support.sdk_agent import run_sdk_agent

FACADE_DOC = Path(__file__).resolve().parents[2] / "docs" / "facade.md"


def snippet() -> str:
    section = FACADE_DOC.read_text().split("## Signed cards", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


async def test_the_signed_card_snippet_verifies_a_facade_card(
    client: Client, gateway_url: str
) -> None:
    async with run_sdk_agent(card="1.0") as agent:
        r = await client.call("POST", "/v1/a2a/agents", {"cardUrl": agent.url})
        assert r.status == 201, r.raw
    namespace: dict[str, Any] = {}
    exec(compile(snippet(), str(FACADE_DOC), "exec"), namespace)  # our own docs
    card = await namespace["verified_card"](gateway_url, r.json()["id"], token())
    assert card.name == "SDK weather agent"
