"""Print the canonical form a2a-sdk 0.3 computes for each card read from stdin (one JSON card
a line; "ERR" for a card that SDK cannot read). Run with tests/support/sdk03/.venv/bin/python."""

from __future__ import annotations

import json
import sys

from a2a.types import AgentCard
from a2a.utils.helpers import canonicalize_agent_card
from pydantic import ValidationError

for line in sys.stdin:
    try:
        print(canonicalize_agent_card(AgentCard.model_validate(json.loads(line))))
    except ValidationError:
        print("ERR")
