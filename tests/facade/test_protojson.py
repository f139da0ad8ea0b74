"""A2A 1.0 clients that write proto field names (ProtoJSON, SPEC §21), on both bindings: every
method and HTTP+JSON route answers them as it answers lowerCamelCase, what reaches the agent
is lowerCamelCase, and a field given under both names is refused."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format
from google.protobuf.message import Message as Proto
from google.protobuf.struct_pb2 import Struct

from a2a_continue.a2a.protojson import json_name
from a2a_continue.facade import http_json
from tests.support import bindings as b
from tests.support.client import Client, register
from tests.support.fakes import StartFake, WeatherFake
from tests.support.receiver import push_receiver
from tests.support.sdk_agent import run_sdk_agent
from tests.support.sse_client import events
from tests.support.waiting import eventually

JSON = dict[str, Any]
BINDINGS = pytest.mark.parametrize("binding", [b.JSONRPC, b.REST])
HOOK = "http://127.0.0.1:9/hook"  # never called: its config is deleted before any change

# The HTTP+JSON route of each 1.0 method; a `{field}` of the path is the request's field, the
# other fields travel in the body of a POST and in the query otherwise (as a2a-sdk sends them).
ROUTES = {
    "SendMessage": ("POST", "/message:send"),
    "SendStreamingMessage": ("POST", "/message:stream"),
    "GetTask": ("GET", "/tasks/{id}"),
    "ListTasks": ("GET", "/tasks"),
    "CancelTask": ("POST", "/tasks/{id}:cancel"),
    "SubscribeToTask": ("GET", "/tasks/{id}:subscribe"),
    "CreateTaskPushNotificationConfig": ("POST", "/tasks/{task_id}/pushNotificationConfigs"),
    "GetTaskPushNotificationConfig": ("GET", "/tasks/{task_id}/pushNotificationConfigs/{id}"),
    "ListTaskPushNotificationConfigs": ("GET", "/tasks/{task_id}/pushNotificationConfigs"),
    "DeleteTaskPushNotificationConfig": (
        "DELETE",
        "/tasks/{task_id}/pushNotificationConfigs/{id}",
    ),
    "GetExtendedAgentCard": ("GET", "/extendedAgentCard"),
}


def _query_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class Facade:
    """A 1.0 client of the façade on one binding, writing each request as a2a-sdk serializes
    its protobuf message: under JSON names, or under proto field names."""

    client: Client
    agent_id: str
    binding: str
    proto_names: bool

    def spelled(self, request: Proto) -> JSON:
        return json_format.MessageToDict(request, preserving_proto_field_name=self.proto_names)

    def route(self, method: str, params: JSON, verb: str | None = None) -> tuple[str, str, Any]:
        """The HTTP method, the path with its query, and the body of ``method``'s route."""
        http, template = ROUTES[method]
        http = verb or http
        fields = re.findall(r"\{(\w+)\}", template)
        path = template.format(**{f: params.get(f, params.get(json_name(f))) for f in fields})
        path = f"/a2a/{self.agent_id}{path}"
        if http == "POST":
            return http, path, params
        skip = {"tenant", *fields, *(json_name(f) for f in fields)}
        query = {k: _query_value(v) for k, v in params.items() if k not in skip}
        return http, path + (f"?{urlencode(query)}" if query else ""), None

    async def call(self, method: str, request: Proto | JSON) -> JSON:
        """The answer as the client reads it: ``{"result"}`` or ``{"error"}`` over JSON-RPC,
        ``{"status", "body"}`` over HTTP+JSON."""
        params = request if isinstance(request, dict) else self.spelled(request)
        if self.binding == b.JSONRPC:
            r = await b.rpc(self.client, self.agent_id, method, params, version="1.0")
            return {k: v for k, v in r.json().items() if k in ("result", "error")}
        http, path, body = self.route(method, params)
        r = await self.client.call(http, path, body)
        return {"status": r.status, "body": r.json()}

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, request: Proto, verb: str | None = None
    ) -> AsyncIterator[AsyncIterator[Any]]:
        """Open a stream; yield its frames as they come (JSON-RPC: its result or error)."""
        params = self.spelled(request)
        headers = {"Authorization": f"Bearer {self.client.bearer}", "A2A-Version": "1.0"}
        if self.binding == b.JSONRPC:
            http, path = "POST", f"/a2a/{self.agent_id}"
            body: Any = {"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params}
        else:
            http, path, body = self.route(method, params, verb)
        url = self.client.base + path
        async with self.client.session.request(http, url, json=body, headers=headers) as r:
            assert r.status == 200, await r.read()

            async def frames() -> AsyncIterator[Any]:
                if not r.content_type.startswith("text/event-stream"):  # refused: one answer
                    yield await r.json()
                    return
                async for event in events(r):
                    data = event.json()
                    if self.binding == b.JSONRPC:
                        yield data.get("result", data.get("error"))
                    else:
                        yield {"event": event.event or "message", "data": data}

            yield frames()


def _answer(answer: JSON) -> Any:
    """What a call answered (its result or body)."""
    return answer["result"] if "result" in answer else answer["body"]


def _frame(frame: Any) -> Any:
    return frame["data"] if isinstance(frame, dict) and "event" in frame else frame


def _send(text: str, task_id: str = "", context_id: str = "", **config: Any) -> Proto:
    message = pb.Message(
        message_id=str(uuid.uuid4()),
        role=pb.Role.ROLE_USER,
        parts=[pb.Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )
    configuration = pb.SendMessageConfiguration(**config) if config else None
    return pb.SendMessageRequest(message=message, configuration=configuration)


def _struct(**members: Any) -> Struct:
    out = Struct()
    out.update(members)
    return out


async def every_method(facade: Facade) -> JSON:
    """Every 1.0 method (every route over HTTP+JSON) on two tasks; each answer by its step."""
    seen: JSON = {}
    seen["start"] = await facade.call(
        "SendMessage", _send("weather?", accepted_output_modes=["text/plain"], history_length=5)
    )
    a = _answer(seen["start"])["task"]
    seen["follow-up"] = await facade.call("SendMessage", _send("Paris", a["id"], a["contextId"]))
    async with facade.stream("SendStreamingMessage", _send("weather?")) as frames:
        seen["stream"] = [frame async for frame in frames]
    b_id = _frame(seen["stream"][0])["task"]["id"]
    seen["get"] = await facade.call("GetTask", pb.GetTaskRequest(id=a["id"], history_length=1))
    filtered = pb.ListTasksRequest(
        context_id=a["contextId"],
        status=pb.TaskState.TASK_STATE_COMPLETED,
        page_size=5,
        include_artifacts=True,
        history_length=0,
    )
    seen["list-filtered"] = await facade.call("ListTasks", filtered)
    seen["list-page-1"] = await facade.call("ListTasks", pb.ListTasksRequest(page_size=1))
    token = _answer(seen["list-page-1"])["nextPageToken"]
    seen["list-page-2"] = await facade.call(
        "ListTasks", pb.ListTasksRequest(page_size=1, page_token=token)
    )
    await _push_configs(facade, b_id, seen)
    subscribe = pb.SubscribeToTaskRequest(id=b_id)
    async with facade.stream("SubscribeToTask", subscribe) as frames:
        seen["subscribe-get"] = await anext(frames)
    async with facade.stream("SubscribeToTask", subscribe, "POST") as frames:
        first = await anext(frames)  # the stored task; the cancel's status follows
        seen["cancel"] = await facade.call(
            "CancelTask", pb.CancelTaskRequest(id=b_id, metadata=_struct(reason_code="done"))
        )
        seen["subscribe-post"] = [first, *[frame async for frame in frames]]
    seen["extended-card"] = await facade.call(
        "GetExtendedAgentCard", pb.GetExtendedAgentCardRequest()
    )
    return seen


async def _push_configs(facade: Facade, task_id: str, seen: JSON) -> None:
    auth = pb.AuthenticationInfo(scheme="Bearer", credentials="cred-1")
    config = pb.TaskPushNotificationConfig(
        task_id=task_id, id="c1", url=HOOK, token="tok-1", authentication=auth
    )
    seen["push-create"] = await facade.call("CreateTaskPushNotificationConfig", config)
    one = pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id="c1")
    seen["push-get"] = await facade.call("GetTaskPushNotificationConfig", one)
    listing = pb.ListTaskPushNotificationConfigsRequest(task_id=task_id, page_size=10)
    seen["push-list"] = await facade.call("ListTaskPushNotificationConfigs", listing)
    gone = pb.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="c1")
    seen["push-delete"] = await facade.call("DeleteTaskPushNotificationConfig", gone)
    seen["push-list-after"] = await facade.call("ListTaskPushNotificationConfigs", listing)


_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)$")


def masked(value: Any) -> Any:
    """``value`` with what differs from one run to the next (ids, times, page tokens) masked."""
    if isinstance(value, dict):
        return {k: "<token>" if k == "nextPageToken" and v else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return "<time>" if _TIME.match(value) else _ID.sub("<id>", value)
    return value


def test_the_routes_driven_here_are_the_1_0_routes() -> None:
    def shape(path: str) -> str:
        return re.sub(r"\{\w+\}", "{}", path)

    served = {(bd.method, verb, shape(path)) for verb, path, bd, *_ in http_json.V10}
    driven = {(name, verb, shape(path)) for name, (verb, path) in ROUTES.items()}
    assert served == driven | {("SubscribeToTask", "POST", "/tasks/{}:subscribe")}


@BINDINGS
async def test_every_1_0_method_answers_proto_field_names_as_it_answers_json_names(
    client: Client, binding: str
) -> None:
    runs: dict[bool, tuple[JSON, list[Any]]] = {}
    for proto_names in (False, True):
        async with run_sdk_agent() as agent:
            agent_id = await register(client, agent.url, "1.0")
            seen = await every_method(Facade(client, agent_id, binding, proto_names))
            runs[proto_names] = (seen, [[r["method"], r["params"]] for r in agent.received])
    seen, received = runs[False]
    # What the JSON names asked for was done (so the proto names asked for it too).
    assert len(_answer(seen["get"])["history"]) == 1
    [listed] = _answer(seen["list-filtered"])["tasks"]
    assert listed["status"]["state"] == "TASK_STATE_COMPLETED" and listed["artifacts"]
    pages = [_answer(seen[f"list-page-{n}"])["tasks"][0]["id"] for n in (1, 2)]
    assert pages[0] != pages[1]
    assert _answer(seen["push-get"])["authentication"] == {"scheme": "Bearer"}
    assert _answer(seen["push-list-after"])["configs"] == []
    assert _frame(seen["subscribe-post"][-1])["statusUpdate"]["status"]["state"] == (
        "TASK_STATE_CANCELED"
    )
    assert [method for method, _ in received] == ["SendMessage"] * 3 + ["GetTask", "CancelTask"]
    assert masked(runs[True][0]) == masked(seen)
    assert masked(runs[True][1]) == masked(received)  # the agent got JSON names both times


FREE = ("metadata", "data")


def _snake_keys(value: Any, free: bool = False) -> list[str]:
    """Every key with an underscore outside free-form JSON (metadata, a data part's data)."""
    if isinstance(value, list):
        return [k for v in value for k in _snake_keys(v)]
    if not isinstance(value, dict) or free:
        return []
    found = [k for k in value if "_" in k]
    return found + [k for key, v in value.items() for k in _snake_keys(v, key in FREE)]


@BINDINGS
async def test_a_send_in_proto_names_at_every_depth_reaches_the_agent_in_json_names(
    client: Client, fake_agent: StartFake, binding: str
) -> None:
    agent = await fake_agent(WeatherFake("1.0"))
    agent_id = await register(client, agent.url, "1.0")
    metadata = {"trace_id": "t-1", "traceId": "both names are the client's own"}
    facade = Facade(client, agent_id, binding, proto_names=True)
    # A task of the caller's to reference (a reference must name a task the caller can see).
    earlier = _answer(await facade.call("SendMessage", {"message": _hi("m-0")}))["task"]["id"]
    async with push_receiver() as receiver:
        config = {
            "id": "inline-1",
            "url": receiver.url,
            "token": "tok-1",
            "authentication": {"scheme": "Bearer", "credentials": "cred-1"},
        }
        params = {
            "message": {
                "message_id": "m-1",
                "role": "ROLE_USER",
                "parts": [
                    {"text": "weather?", "media_type": "text/plain", "metadata": metadata},
                    {"data": {"city_name": "Paris"}, "media_type": "application/json"},
                ],
                "reference_task_ids": [earlier],
                "metadata": metadata,
            },
            "configuration": {
                "accepted_output_modes": ["text/plain"],
                "history_length": 2,
                "task_push_notification_config": config,
            },
            "metadata": metadata,
        }
        task = _answer(await facade.call("SendMessage", params))["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        [_, sent] = agent.received
        assert _snake_keys(sent) == []
        message = sent["params"]["message"]
        assert message["parts"] == [
            {"text": "weather?", "mediaType": "text/plain", "metadata": metadata},
            {"data": {"city_name": "Paris"}, "mediaType": "application/json"},
        ]
        assert (message["referenceTaskIds"], message["metadata"]) == ([earlier], metadata)
        assert sent["params"]["metadata"] == metadata
        assert sent["params"]["configuration"] == {
            "acceptedOutputModes": ["text/plain"],
            "historyLength": 2,
        }
        (got,) = await eventually(lambda: receiver.ok() or None, "the inline config's delivery")
    assert got.headers["X-A2A-Notification-Token"] == "tok-1"
    assert got.headers["Authorization"] == "Bearer cred-1"
    listing = {"task_id": task["id"]}
    configs = _answer(await facade.call("ListTaskPushNotificationConfigs", listing))["configs"]
    assert [c["id"] for c in configs] == ["inline-1"]


def _hi(message_id: str, **part: Any) -> JSON:
    return {"message_id": message_id, "role": "ROLE_USER", "parts": [{"text": "hi", **part}]}


_WEBHOOK = {"url": HOOK, "task_id": "T1", "taskId": "T1"}
# (method, params in proto names with one field also under its JSON name, where it is named)
BOTH_NAMES = [
    ("SendMessage", {"message": {**_hi("m-1"), "messageId": "m-1"}}, "$.params.message.messageId"),
    (
        "SendMessage",
        {"message": _hi("m-2", media_type="a", mediaType="a")},
        "$.params.message.parts[0].mediaType",
    ),
    (
        "SendMessage",
        {"message": _hi("m-3"), "configuration": {"task_push_notification_config": _WEBHOOK}},
        "$.params.configuration.taskPushNotificationConfig.taskId",
    ),
    ("CreateTaskPushNotificationConfig", _WEBHOOK, "$.params.taskId"),
]


@BINDINGS
@pytest.mark.parametrize(("method", "params", "loc"), BOTH_NAMES)
async def test_a_body_with_one_field_under_both_names_is_refused_naming_it(
    client: Client, fake_agent: StartFake, binding: str, method: str, params: JSON, loc: str
) -> None:
    agent = await fake_agent(WeatherFake("1.0"))
    agent_id = await register(client, agent.url, "1.0")
    r = await Facade(client, agent_id, binding, proto_names=True).call(method, params)
    refused = _refusal(r)
    assert refused["code"] == -32602 and refused["message"].startswith(f"{loc}: is given twice")
    assert agent.received == []


_BOTH_IN_QUERY = [
    ("GetTask", {"id": "T1", "history_length": 1, "historyLength": 1}, "historyLength"),
    ("ListTasks", {"page_size": 1, "pageSize": 2}, "pageSize"),
    (
        "ListTaskPushNotificationConfigs",
        {"task_id": "T1", "page_token": "p", "pageToken": "p"},
        "pageToken",
    ),
]


@BINDINGS
@pytest.mark.parametrize(("method", "params", "name"), _BOTH_IN_QUERY)
async def test_a_query_or_params_with_one_field_under_both_names_is_refused(
    client: Client, binding: str, method: str, params: JSON, name: str
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    r = await Facade(client, agent_id, binding, proto_names=True).call(method, params)
    refused = _refusal(r)
    where = "$.params" if binding == b.JSONRPC else "$.query"
    assert refused["code"] == -32602
    assert refused["message"].startswith(f"{where}.{name}: is given twice")


def _refusal(answer: JSON) -> JSON:
    """A refusal's JSON-RPC code and message, from either binding."""
    if "error" in answer:
        return dict(answer["error"])
    assert answer["status"] == 400, answer
    error = answer["body"]["error"]
    assert error["details"][0]["reason"] == "INVALID_PARAMS"
    return {"code": -32602, "message": error["message"]}


async def test_a_retry_in_proto_names_replays_the_send_made_in_json_names(
    client: Client, fake_agent: StartFake
) -> None:
    agent = await fake_agent(WeatherFake("1.0"))
    agent_id = await register(client, agent.url, "1.0")
    request = _send("weather?")
    answers = []
    for proto_names in (False, True):
        params = Facade(client, agent_id, b.JSONRPC, proto_names).spelled(request)
        r = await b.rpc(client, agent_id, "SendMessage", params, version="1.0")
        answers.append((r.json()["result"], r.headers.get("Idempotent-Replayed")))
    assert answers[1] == (answers[0][0], "true")
    assert len(agent.received) == 1


async def test_a_both_names_refusal_without_a2a_version_is_in_the_1_0_shape(
    client: Client,
) -> None:
    agent_id = await register(client, "http://127.0.0.1:9/", "1.0")
    params = {"page_size": 1, "pageSize": 1}
    r = await b.rpc(client, agent_id, "ListTasks", params, rpc_id=7)  # no A2A-Version header
    error = r.json()["error"]
    assert (r.json()["id"], error["code"]) == (7, -32602)
    [info] = error["data"]  # 1.0: a list holding one google.rpc.ErrorInfo
    assert info["reason"] == "INVALID_PARAMS"
    assert "$.params.pageSize" in info["metadata"]["errors"]
