"""Helpers of the push tests: fast retry settings, a task to push from, a config on it."""

from __future__ import annotations

from typing import Any

import msgspec

from a2a_continue.settings import Settings
from tests.support.client import Client

JSON = dict[str, Any]


def fast_push(settings: Settings, **overrides: Any) -> Settings:
    """The test settings with retries short enough to watch a delivery die."""
    values: JSON = {
        "push_retry_base_s": 0.05,
        "push_retry_max_s": 0.2,
        "push_poll_s": 0.5,
        "push_max_attempts": 3,
        "push_timeout_s": 3.0,
        **overrides,
    }
    return msgspec.structs.replace(settings, **values)


async def start_task(client: Client, agent_id: str, text: str = "weather?") -> str:
    """Start a task through REST; return the agent's task id."""
    r = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": text})
    assert r.status == 200, r.raw
    result = r.json()["result"]
    return str(result["task"]["id"] if "task" in result else result["id"])


async def add_config(client: Client, agent_id: str, task_id: str, **body: Any) -> JSON:
    """Create a push config through REST; return it."""
    r = await client.call("POST", f"/v1/a2a/{agent_id}/tasks/{task_id}/push-configs", body)
    assert r.status == 201, r.raw
    config: JSON = r.json()
    return config


async def deliveries(client: Client, agent_id: str, task_id: str, config_id: str) -> list[JSON]:
    """Every delivery of a config, in the order they are sent."""
    path = f"/v1/a2a/{agent_id}/tasks/{task_id}/push-configs/{config_id}/deliveries?limit=200"
    r = await client.call("GET", path)
    assert r.status == 200, r.raw
    found: list[JSON] = r.json()["deliveries"]
    return found


async def owed(db: Any) -> list[tuple[int, int, str]]:
    """What every enabled config's log still owes it, in order: (seq, part, kind)."""
    from a2a_continue.core.push.owed import parts_sql

    rows = await db.fetch(
        f"SELECT n.seq, n.part, n.kind FROM a2a_push_configs c CROSS JOIN LATERAL"
        f" ({parts_sql('c')}) n WHERE c.enabled ORDER BY n.seq, n.part"
    )
    return [(r["seq"], r["part"], r["kind"]) for r in rows]
