"""Property-based: no JSON-RPC request to the façade gets anything but a JSON-RPC answer
(HTTP 200, the client's id) and no unexpected error; refusals write nothing, call no agent."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import asyncpg
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.client import Client, Response, register
from tests.support.fakes import StartFake

T = TypeVar("T")
JSON = dict[str, Any]

text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "\x00", "T1", "x" * 300, "TASK_STATE_WORKING", "null"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=10,
)


def some_of(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[JSON]:
    return st.fixed_dictionaries({}, optional={k: st.one_of(v, values) for k, v in fields.items()})


parts = st.lists(
    some_of(
        {
            "text": text,
            "kind": st.sampled_from(["text", "file", "data"]),
            "data": values,
            "url": text,
            "raw": text,
            "file": some_of({"uri": text, "bytes": text}),
        }
    ),
    max_size=3,
)
message = some_of(
    {
        "parts": parts,
        "role": st.sampled_from(["user", "ROLE_USER", "agent", "ROLE_AGENT"]),
        "taskId": st.sampled_from(["T1", "nope"]),
        "contextId": st.sampled_from(["C1", "other"]),
        "messageId": text,
        "kind": st.sampled_from(["message", "task"]),
    }
)
send_params = some_of(
    {
        "message": message,
        "configuration": some_of({"historyLength": st.integers(-5, 5), "blocking": values}),
        "metadata": values,
    }
)
task_params = some_of({"id": st.sampled_from(["T1", "nope", ""]), "historyLength": st.integers()})
list_params = some_of(
    {
        "pageSize": st.integers(-1, 200),
        "pageToken": text,
        "status": st.sampled_from(["TASK_STATE_INPUT_REQUIRED", "working", "bogus"]),
        "contextId": text,
        "includeArtifacts": values,
    }
)
METHODS = {
    "SendMessage": send_params,
    "message/send": send_params,
    "GetTask": task_params,
    "tasks/get": task_params,
    "ListTasks": list_params,
    "CancelTask": task_params,
    "tasks/cancel": task_params,
    "tasks/pushNotificationConfig/set": values,
    "agent/getAuthenticatedExtendedCard": values,
}
requests = st.one_of(
    st.sampled_from(sorted(METHODS)).flatmap(
        lambda method: st.tuples(
            st.just(method),
            st.one_of(METHODS[method], values),
            st.one_of(
                st.integers(-(2**70), 2**70),
                st.floats(allow_nan=False, allow_infinity=False),
                text,
                st.none(),
            ),
        )
    ),
)
ANSWERED_BY_AGENT = {-32002, -32004}  # the fake agent's own refusals, passed on


class Bridge:
    """Runs the test loop's coroutines from Hypothesis's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)


async def counts(db: asyncpg.Connection) -> tuple[int, int]:
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM a2a_tasks) AS t, (SELECT count(*) FROM a2a_task_events) AS e"
    )
    assert row is not None
    return int(row["t"]), int(row["e"])


async def agent_answer(body: JSON) -> JSON:
    """Keep T1 waiting for input whatever is sent; refuse to cancel it."""
    if body["method"] in ("CancelTask", "tasks/cancel"):
        error = {"code": -32002, "message": "not now"}
        return {"jsonrpc": "2.0", "id": body["id"], "error": error}
    task = {"id": "T1", "contextId": "C1", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}
    return {"jsonrpc": "2.0", "id": body["id"], "result": {"task": task}}


async def test_no_json_rpc_request_gets_an_unexpected_error_and_refusals_write_nothing(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(agent_answer)
    agent_id = await register(client, fake.url, "1.0")
    r = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    bridge = Bridge(asyncio.get_running_loop())

    @settings(
        max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(requests)
    def one(request: tuple[str, Any, Any]) -> None:
        method, params, rpc_id = request
        before, sent = bridge.run(counts(db)), len(fake.received)
        body = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
        headers = {"A2A-Version": "0.3" if "/" in method else "1.0"}
        answer: Response = bridge.run(
            client.call("POST", f"/a2a/{agent_id}", body, headers=headers)
        )
        assert answer.status == 200, answer.raw
        reply = msgspec.json.decode(answer.raw)
        assert reply["jsonrpc"] == "2.0" and reply["id"] == rpc_id, answer.raw
        error = reply.get("error")
        if error is None:
            return
        assert error["code"] != -32603, answer.raw  # no unexpected failure
        if error["code"] not in ANSWERED_BY_AGENT:
            assert bridge.run(counts(db)) == before, answer.raw
            assert len(fake.received) == sent, answer.raw

    await asyncio.to_thread(one)


rest_requests = st.one_of(
    st.tuples(st.just("POST"), st.just("/message:send"), st.one_of(send_params, values)),
    st.tuples(st.just("POST"), st.just("/v1/message:send"), st.one_of(send_params, values)),
    st.tuples(
        st.just("POST"), st.sampled_from(["/tasks/T1:cancel", "/v1/tasks/nope:cancel"]), values
    ),
    st.tuples(
        st.just("GET"),
        st.builds(
            lambda size, length: f"/tasks?pageSize={size}&historyLength={length}",
            st.one_of(st.integers(-1, 200), text),
            st.integers(-3, 3),
        ),
        st.none(),
    ),
    st.tuples(
        st.just("GET"),
        st.builds(
            lambda length: f"/v1/tasks/T1?historyLength={length}", st.one_of(st.integers(), text)
        ),
        st.none(),
    ),
)


async def test_no_http_json_request_gets_an_unexpected_error_and_refusals_write_nothing(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    fake = await fake_agent(agent_answer)
    agent_id = await register(client, fake.url, "1.0")
    r = await client.call("POST", f"/v1/a2a/{agent_id}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    bridge = Bridge(asyncio.get_running_loop())

    @settings(
        max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(rest_requests)
    def one(request: tuple[str, str, Any]) -> None:
        method, path, body = request
        before, sent = bridge.run(counts(db)), len(fake.received)
        target = f"/a2a/{agent_id}{path}".replace(" ", "%20")
        answer: Response = bridge.run(client.call(method, target, body))
        assert answer.status < 500, answer.raw  # no unexpected failure
        if answer.status == 200:
            return
        reply = msgspec.json.decode(answer.raw)
        if answer.headers["Content-Type"] == "application/problem+json":
            # the gateway's own checks of every request (a query with U+0000): before any route
            assert answer.status == 422, answer.raw
            assert bridge.run(counts(db)) == before and len(fake.received) == sent
            return
        assert answer.headers["Content-Type"].startswith("application/json"), answer.raw
        code = reply["code"] if path.startswith("/v1/") else reply["error"]["code"]
        assert code in (-32001, -32002, -32004, -32602, -32600, -32700, 400, 404), answer.raw
        agent_refused = code in ANSWERED_BY_AGENT or (
            "error" in reply and reply["error"]["details"][0]["reason"] == "TASK_NOT_CANCELABLE"
        )
        if not agent_refused:
            assert bridge.run(counts(db)) == before, answer.raw
            assert len(fake.received) == sent, answer.raw

    await asyncio.to_thread(one)
