from __future__ import annotations

from a2a_continue.sample_agent import start_sample_agent
from tests.conftest import Client


async def test_two_turns_through_sample_agent(client: Client) -> None:
    runner, url = await start_sample_agent()
    try:
        r = await client.call(
            "POST", "/v1/a2a/agents", {"name": "w", "endpointUrl": url, "protocolVersion": "1.0"}
        )
        assert r.status == 201, r.raw
        agent = r.json()["id"]
        r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "weather?"})
        assert r.status == 200, r.raw
        assert r.headers["A2A-Task-State"] == "input-required"
        task = r.json()["result"]["task"]["id"]
        r = await client.call("POST", f"/v1/a2a/{agent}/tasks/{task}/messages", {"text": "Paris"})
        assert r.status == 200, r.raw
        assert r.headers["A2A-Task-State"] == "completed"
        r = await client.call("GET", f"/v1/a2a/{agent}/tasks/{task}/events")
        print(r.json())
        assert [e["type"] for e in r.json()["events"]] == ["task_created", "task_continued"]
        r = await client.call("GET", f"/v1/a2a/{agent}/tasks/{task}")
        print(r.json())
    finally:
        await runner.cleanup()
