"""Property-based: no body, path id or query value of the REST routes gets a 500; every 4xx
is problem+json; a refused request writes no row and no event and calls no agent."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import asyncpg
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.client import Client, Response, register
from tests.support.database import counts
from tests.support.fakes import FakeAgent, Scripted, StartFake, task_v10

T = TypeVar("T")
EXAMPLES = 100

# Text with what tends to break stores and parsers: NUL, controls, non-ASCII, long runs.
nasty_text = st.one_of(
    st.text(max_size=20),
    st.builds(lambda a, b: f"{a}\x00{b}", st.text(max_size=5), st.text(max_size=5)),
    st.text(alphabet=st.sampled_from("\x00\r\n\t/%?#\\\"' éü🚀\u202e\ufffd"), max_size=12),
    st.sampled_from(["", " ", "x" * 600, "\x00", "null", "0", "-1", "1e400", "HTTP://x"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    nasty_text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(nasty_text, inner, max_size=3)
    ),
    max_leaves=12,
)


def deep(depth: int) -> bytes:
    return b'{"metadata": ' + b"[" * depth + b"]" * depth + b"}"


def shaped(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Objects holding some of ``fields`` (each a plausible or a wild value)."""
    return st.fixed_dictionaries(
        {}, optional={k: st.one_of(v, json_values) for k, v in fields.items()}
    )


hosts = st.one_of(
    st.sampled_from(
        ["127.0.0.1", "169.254.169.254", "2852039166", "[fe80::1]", "0", "[::1]", "[::1", "[zz]"]
    ),
    nasty_text,
)
urls = st.builds(
    lambda scheme, host, port, path: f"{scheme}://{host}{port}/{path}",
    st.sampled_from(["http", "HTTP", "https", "ftp", "", "javascript"]),
    hosts,
    st.sampled_from(["", ":0", ":1", ":65535", ":65536", ":-1", ":x", ":99999999999"]),
    nasty_text,
)
auths = st.one_of(
    st.fixed_dictionaries({"type": st.just("bearer"), "token": nasty_text}),
    st.fixed_dictionaries(
        {"type": st.just("basic"), "username": nasty_text, "password": nasty_text}
    ),
    st.fixed_dictionaries(
        {"type": st.just("headers"), "headers": st.dictionaries(nasty_text, nasty_text)}
    ),
    json_values,
)
agent_fields = {
    "name": nasty_text,
    "endpointUrl": urls,
    "protocolVersion": st.sampled_from(["1.0", "0.3", "2.0"]),
    "visibility": st.sampled_from(["private", "team", "public", "PUBLIC"]),
    "teamId": nasty_text,
    "auth": auths,
    "timeoutSeconds": st.one_of(st.floats(), st.integers()),
}
parts = st.lists(
    shaped(
        {
            "text": nasty_text,
            "kind": st.sampled_from(["text", "file", "data"]),
            "data": json_values,
            "url": nasty_text,
            "raw": nasty_text,
            "file": shaped({"uri": nasty_text, "bytes": nasty_text, "name": nasty_text}),
            "metadata": json_values,
        }
    ),
    max_size=3,
)
send_fields = {
    "text": nasty_text,
    "message": shaped(
        {
            "parts": parts,
            "role": st.sampled_from(["user", "ROLE_USER", "agent"]),
            "taskId": nasty_text,
            "contextId": nasty_text,
            "messageId": nasty_text,
            "metadata": json_values,
            "referenceTaskIds": st.lists(nasty_text, max_size=2),
        }
    ),
    "configuration": shaped(
        {"historyLength": st.integers(), "acceptedOutputModes": st.lists(nasty_text)}
    ),
    "metadata": json_values,
    "teamId": nasty_text,
}


VALID_AGENT = {"name": "n", "endpointUrl": "http://127.0.0.1:9/", "protocolVersion": "1.0"}


def as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else msgspec.json.encode(value)


def bodies(
    fields: dict[str, st.SearchStrategy[Any]], valid: dict[str, Any] | None = None
) -> st.SearchStrategy[bytes]:
    """Bodies: a valid one with one field made wild (mostly), or anything at all."""
    base = valid or {}
    one_wild = (
        st.sampled_from(sorted(fields)).flatmap(
            lambda name: st.one_of(fields[name], json_values).map(
                lambda value: as_bytes({**base, name: value})
            )
        )
        if fields
        else st.just(b"{}")
    )
    return st.one_of(
        one_wild,
        one_wild,
        one_wild,
        shaped(fields).map(lambda wild: as_bytes({**base, **wild})),
        shaped(fields).map(as_bytes),
        json_values.map(as_bytes),
        st.binary(max_size=40),
        st.integers(min_value=60, max_value=3000).map(deep),
    )


class Bridge:
    """Runs the gateway's coroutines on the test's loop from Hypothesis's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)


def check(
    bridge: Bridge,
    client: Client,
    db: asyncpg.Connection,
    fake: FakeAgent,
    method: str,
    path: str,
    body: bytes | None = None,
) -> Response:
    """Send one request; assert the invariants; return the answer."""
    before = bridge.run(counts(db))
    sent = len(fake.received)
    headers = {"Content-Type": "application/json"}
    r = bridge.run(client.call(method, path, data=body, headers=headers))
    assert r.status != 500, (method, path, body, r.raw)
    if 400 <= r.status < 500:
        assert r.headers["Content-Type"].startswith("application/problem+json"), r.raw
        assert r.json()["status"] == r.status
        assert bridge.run(counts(db)) == before, (method, path, body, r.raw)
        assert len(fake.received) == sent
    return r


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


async def test_no_input_to_any_rest_route_is_a_500_and_refusals_write_nothing(
    client: Client, db: asyncpg.Connection, fake_agent: StartFake
) -> None:
    # The task stays open: every follow-up gets as far as the agent when its body is valid.
    fake = await fake_agent(Scripted(follow_up=lambda r: task_v10("T1", "input-required")))
    agent = await register(client, fake.url)
    victim = await register(client, "http://127.0.0.1:9/")
    r = await client.call("POST", f"/v1/a2a/{agent}/messages", {"text": "hi"})
    assert r.status == 200, r.raw
    bridge = Bridge(asyncio.get_running_loop())
    task = f"/v1/a2a/{agent}/tasks/T1"

    def send(method: str, path: str, body: bytes | None = None) -> Response:
        return check(bridge, client, db, fake, method, path, body)

    @FUZZ
    @given(bodies(agent_fields, VALID_AGENT))
    def registration(body: bytes) -> None:
        send("POST", "/v1/a2a/agents", body)

    @FUZZ
    @given(bodies(agent_fields))
    def patch(body: bytes) -> None:
        send("PATCH", f"/v1/a2a/agents/{victim}", body)

    @FUZZ
    @given(bodies(send_fields, {"text": "hi"}))
    def start(body: bytes) -> None:
        send("POST", f"/v1/a2a/{agent}/messages", body)

    @FUZZ
    @given(bodies(send_fields, {"text": "hi"}))
    def follow_up(body: bytes) -> None:
        send("POST", task + "/messages", body)

    @FUZZ
    @given(st.one_of(st.just(b""), bodies({})))
    def cancel(body: bytes) -> None:
        # An agent that cancels would end T1: only refused bodies reach no agent here.
        if body.strip() not in (b"", b"{}"):
            send("POST", task + "/cancel", body)

    @FUZZ
    @given(nasty_text, st.sampled_from(["", "/events", "/messages", "/cancel"]))
    def path_ids(task_id: str, suffix: str) -> None:
        method = "GET" if suffix in ("", "/events") else "POST"
        body = b'{"text": "x"}' if suffix == "/messages" else None
        if suffix == "/cancel" or (suffix == "/messages" and task_id == "T1"):
            method, suffix = "GET", ""
        send(method, f"/v1/a2a/{agent}/tasks/{quote(task_id, safe='')}{suffix}", body)
        send("GET", f"/v1/a2a/agents/{quote(task_id, safe='')}")

    params = st.dictionaries(
        st.sampled_from(["limit", "cursor", "state", "contextId", "after", "x"]),
        st.one_of(nasty_text, st.integers(min_value=-(2**70), max_value=2**70).map(str)),
        max_size=3,
    )

    @FUZZ
    @given(params, st.sampled_from(["/v1/a2a/agents", f"/v1/a2a/{agent}/tasks", task + "/events"]))
    def queries(query: dict[str, str], path: str) -> None:
        send("GET", f"{path}?{urlencode(query)}")

    for run in (registration, patch, start, follow_up, cancel, path_ids, queries):
        await asyncio.to_thread(run)
