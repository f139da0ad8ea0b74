"""Sign a 0.3 agent card with a2a-sdk 0.3's own signer, as an agent on that SDK publishes it.

Run with tests/support/sdk03/.venv/bin/python; reads {"card": …, "pem": …, "header": …} on
stdin and prints the signed card as that SDK serves it (by alias, nulls left out).
"""

from __future__ import annotations

import json
import sys

from a2a.types import AgentCard
from a2a.utils.signing import create_agent_card_signer
from cryptography.hazmat.primitives import serialization

given = json.load(sys.stdin)
key = serialization.load_pem_private_key(given["pem"].encode(), password=None)
signed = create_agent_card_signer(key, given["header"])(AgentCard.model_validate(given["card"]))
print(json.dumps(signed.model_dump(mode="json", by_alias=True, exclude_none=True)))
