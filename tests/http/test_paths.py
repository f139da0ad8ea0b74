"""Any agent-chosen task id is reachable, percent-encoded, through every task route."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import msgspec
import pytest
from multidict import CIMultiDict
from yarl import URL

from a2a_continue.http.paths import routing_path
from tests.support.client import Client, Response, register
from tests.support.fakes import Scripted, StartFake, task_v10

ODD_IDS = {
    "slash": "runs/42",
    "slashes": "/a//b/",
    "percent": "100%25 done%",
    "space": "my task",
    "non-ascii": "tâche-№5-🚀",
    "dots": "..",
    "query-like": "a?b=c#d",
    "encoded-looking": "a%2Fb",
}


def test_routing_path_keeps_slashes_and_percents_of_a_segment_encoded() -> None:
    assert routing_path(b"/t/a%2Fb/x") == "/t/a%2Fb/x"
    assert routing_path(b"/t/a%252Fb") == "/t/a%252Fb"
    assert routing_path(b"/t/my%20task") == "/t/my task"


def encode_id(task_id: str) -> str:
    """Percent-encode a task id as one path segment; dots too, which clients would resolve."""
    return quote(task_id, safe="").replace(".", "%2E")


async def call(client: Client, method: str, path: str, json: Any = None) -> Response:
    """Send the path exactly as encoded (no dot-segment resolution by the client)."""
    headers = {"Authorization": f"Bearer {client.bearer}", "Content-Type": "application/json"}
    data = msgspec.json.encode(json) if json is not None else None
    url = URL(client.base + path, encoded=True)
    async with client.session.request(method, url, data=data, headers=headers) as r:
        return Response(r.status, CIMultiDict(r.headers), await r.read())


@pytest.mark.parametrize("name", sorted(ODD_IDS))
async def test_every_task_route_reaches_a_percent_encoded_task_id(
    client: Client, fake_agent: StartFake, name: str
) -> None:
    task_id = ODD_IDS[name]
    script = Scripted(
        start=lambda r: task_v10(task_id, "input-required"),
        follow_up=lambda r: task_v10(r["params"]["message"]["taskId"], "input-required"),
    )
    fake = await fake_agent(script)
    agent = await register(client, fake.url)
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    base = f"/v1/a2a/{agent}/tasks/{encode_id(task_id)}"

    r = await call(client, "GET", base)
    assert (r.status, r.json()["id"]) == (200, task_id), r.raw
    r = await call(client, "GET", base + "/events")
    assert r.status == 200, r.raw
    r = await call(client, "POST", base + "/messages", {"text": "more"})
    assert r.status == 200, r.raw
    assert fake.received[-1]["params"]["message"]["taskId"] == task_id
    r = await call(client, "POST", base + "/cancel")
    assert (r.status, r.json()["state"]) == (200, "canceled"), r.raw
    assert fake.received[-1]["params"]["id"] == task_id
