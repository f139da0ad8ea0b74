"""The A2A methods the façade serves, each on top of the gateway's own use cases."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import msgspec
from starlette.responses import Response

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import ERROR, TASK, Update
from a2a_continue.core.agents.exchange import target_of
from a2a_continue.core.shapes.messages import ContinueBody, StartBody
from a2a_continue.core.tasks.listing import count_agent_tasks
from a2a_continue.core.tasks.reads import find_task, list_task_rows, task_out
from a2a_continue.core.tasks.updates import record_update
from a2a_continue.core.turns import continuation, invoke
from a2a_continue.core.watch.snapshots import ask_agent
from a2a_continue.errors import AgentBadAnswer, Invalid, NotCancelable
from a2a_continue.facade import keys, push, translate
from a2a_continue.facade.context import Call
from a2a_continue.facade.errors import (
    CANCEL_METHODS,
    INVALID_PARAMS,
    RpcError,
    from_agent_error,
)
from a2a_continue.facade.stored import kept_task, replayed_task, stored_task, with_stored_time
from a2a_continue.http.handlers import forwarded
from a2a_continue.runtime.db import Record

JSON = dict[str, Any]

MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 50


class AgentRpcError(Exception):
    """The agent answered with a JSON-RPC error, passed on in the client's version."""

    def __init__(self, error: object, version: str) -> None:
        super().__init__("the agent answered with an error")
        self.error = from_agent_error(error, version)


def bad_params(loc: str, msg: str) -> RpcError:
    """An invalid-params error naming where the params are wrong."""
    return RpcError(INVALID_PARAMS, f"{loc}: {msg}", errors=[{"loc": loc, "msg": msg}])


def _object(params: JSON, name: str, required: bool = False) -> JSON | None:
    value = params.get(name)
    if value is None:
        if required:
            raise bad_params(f"$.params.{name}", "is required")
        return None
    if not isinstance(value, dict):
        raise bad_params(f"$.params.{name}", "must be an object")
    return value


def _task_id(params: JSON) -> str:
    value = params.get("id")
    if not isinstance(value, str) or not value:
        raise bad_params("$.params.id", "must be a non-empty string")
    return value


def _history_length(source: JSON | None, loc: str) -> int | None:
    value = (source or {}).get("historyLength")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise bad_params(f"{loc}.historyLength", "must be an integer >= 0")
    return value


def _return_immediately(config: JSON) -> bool | None:
    """1.0 `returnImmediately`, or its 0.3 spelling `blocking: false` (§8.4)."""
    for key, flip in (("returnImmediately", False), ("blocking", True)):
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise bad_params(f"$.params.configuration.{key}", "must be a boolean")
        return value != flip
    return None


_ROLES = frozenset({"user", "agent", "ROLE_USER", "ROLE_AGENT"})


def check_message(message: JSON) -> None:
    """A message as A2A defines it: `messageId`, `role` and non-empty `parts` required (the
    gateway then replaces the messageId, but a client must still send one)."""
    loc = "$.params.message"
    message_id = message.get("messageId")
    if not isinstance(message_id, str) or not message_id:
        raise bad_params(f"{loc}.messageId", "is required (a non-empty string)")
    role = message.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise bad_params(f"{loc}.role", "is required: ROLE_USER (1.0) or user (0.3)")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise bad_params(f"{loc}.parts", "is required (a non-empty list of parts)")


def send_body(params: JSON) -> StartBody:
    """Read a send's params (either version) as the body of a REST start or follow-up."""
    message = _object(params, "message", required=True)
    assert message is not None
    check_message(message)
    config = _object(params, "configuration") or {}
    body: JSON = {"message": message}
    gateway_config = {
        "historyLength": _history_length(config, "$.params.configuration"),
        "acceptedOutputModes": config.get("acceptedOutputModes") or None,
        "returnImmediately": _return_immediately(config),
    }
    if any(value is not None for value in gateway_config.values()):
        body["configuration"] = gateway_config
    if params.get("metadata") is not None:
        body["metadata"] = params["metadata"]
    try:
        return msgspec.convert(body, StartBody)
    except msgspec.ValidationError as exc:
        text, _, loc = str(exc).partition(" - at `")
        raise bad_params((loc.rstrip("`") or "$").replace("$", "$.params", 1), text) from None


def _answer(answer: Update, version: str) -> object:
    """The agent's answer in the client's version: its result, or its error raised."""
    if answer.kind == ERROR:
        raise AgentRpcError(answer.raw, version)
    return translate.shaped(answer.kind, answer.raw, version)


def _kept_answer(raw: bytes, version: str) -> object:
    """A kept answer in the client's version, read from its bytes (no agent was asked)."""
    reply = msgspec.json.decode(raw)
    if reply.get("error") is not None:
        raise AgentRpcError(reply["error"], version)
    return translate.result(reply.get("result"), version)


async def send(call: Call, params: JSON) -> object:
    """SendMessage / message/send: a start, or a follow-up when the message names a task.

    A push config given inline covers the send's own changes: created before a follow-up,
    and with a start's task (its first delivery is that task)."""
    body = send_body(params)
    assert body.message is not None
    task_id = body.message.task_id
    inline = push.inline_config(params)
    async with keys.hold_for(call, params, with_claim=task_id is not None) as held_key:
        if task_id is None:
            if inline is not None:
                push.check_inline(call, inline)
            sent = await invoke.start_task(call.gw, call.caller, call.agent_id, body)
            if inline is not None and sent.answer.kind == TASK and sent.answer.task_id:
                await push.create_inline(call, sent.answer.task_id, inline, deliver_task=True)
        else:
            if inline is not None:
                await push.create_inline(call, task_id, inline, deliver_task=False)
            sent = await continuation.continue_task(
                call.gw, call.caller, call.agent_id, task_id, as_continue(body), key=held_key
            )
        sent = with_stored_time(sent)
        held_key.keep(forwarded(sent))
    return _answer(sent.answer, call.version)


def replayed(call: Call, status: int, raw: bytes) -> object:
    """A kept answer, for the retrying client (a kept refusal is raised again)."""
    if call.method in CANCEL_METHODS:
        if status != 200:
            detail = msgspec.json.decode(raw).get("detail", "the agent refused to cancel")
            raise NotCancelable(str(detail))
        return replayed_task(raw, call.version)
    return _kept_answer(raw, call.version)


def as_continue(body: StartBody) -> ContinueBody:
    """The body of a follow-up: a start's body without its team."""
    return ContinueBody(
        message=body.message,
        text=body.text,
        configuration=body.configuration,
        metadata=body.metadata,
    )


async def get(call: Call, params: JSON) -> object:
    """GetTask / tasks/get: ask the agent, record what changed, answer the agent's task."""
    task_id = _task_id(params)
    history_length = _history_length(params, "$.params")
    async with call.gw.connection() as conn:
        row = await find_task(conn, call.caller, call.agent_id, task_id)
    target = target_of(row, call.gw.sealer, call.gw.settings.agent_timeout_s)
    answer = await ask_agent(call.gw, target, task_id, history_length)
    if answer.kind == ERROR:
        raise AgentRpcError(answer.raw, call.version)
    if answer.kind != TASK or answer.task_id != task_id:
        raise AgentBadAnswer("the agent answered GetTask without the task")
    stored = await _record_refresh(call, row, answer)
    shown = translate.stamped(TASK, answer.raw, stored["state"], stored["status_at"])
    return translate.task(shown, call.version, history_length)


async def _record_refresh(call: Call, row: Any, answer: Update) -> Record:
    """Record what the agent's answer changed, as `GET …?refresh=true` does (§8.4); return
    the task row as stored then."""
    async with call.gw.connection() as conn:
        applied = await record_update(
            conn, row["row_id"], answer, source="refresh", actor=call.caller.sub
        )
    return applied.row


async def cancel(call: Call, params: JSON) -> object:
    """CancelTask / tasks/cancel: the REST cancel, answered as an A2A task."""
    task_id = _task_id(params)
    async with keys.hold_for(call, params) as held_key:
        row = await invoke.cancel_task_row(call.gw, call.caller, call.agent_id, task_id)
        task = task_out(row)
        held_key.keep(Response(kept_task(task, row["status_at"]), media_type="application/json"))
    return stored_task(task, call.version, row["status_at"])


def _page_size(params: JSON) -> int:
    value = params.get("pageSize", DEFAULT_PAGE_SIZE)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_params("$.params.pageSize", "must be an integer")
    if not 1 <= value <= MAX_PAGE_SIZE:
        raise bad_params("$.params.pageSize", f"must be between 1 and {MAX_PAGE_SIZE}")
    return value


def _list_query(params: JSON) -> dict[str, str]:
    _history_length(params, "$.params")  # the listed tasks carry no history; a bad one is refused
    if params.get("statusTimestampAfter") is not None:
        raise bad_params("$.params.statusTimestampAfter", "is not supported by this gateway")
    query = {"limit": str(_page_size(params))}
    for name, key in (("contextId", "contextId"), ("pageToken", "cursor")):
        value = params.get(name)
        if value is not None and not isinstance(value, str):
            raise bad_params(f"$.params.{name}", "must be a string")
        if value:
            query[key] = value
    status = params.get("status")
    if status not in (None, "", "TASK_STATE_UNSPECIFIED"):
        if not isinstance(status, str) or protocol.canonical_state(status) == "unknown":
            raise bad_params("$.params.status", "must be a task state such as TASK_STATE_WORKING")
        query["state"] = protocol.canonical_state(status)
    return query


async def list_(call: Call, params: JSON) -> object:
    """ListTasks (1.0): the caller's tasks of this agent from the store, newest first."""
    query = _list_query(params)
    try:
        async with call.gw.connection() as conn:
            rows, cursor = await list_task_rows(conn, call.caller, call.agent_id, query)
            total = await count_agent_tasks(
                conn, call.caller, call.agent_id, query.get("state"), query.get("contextId")
            )
    except Invalid as error:
        loc = error.extra["errors"][0]["loc"].replace("$.query.cursor", "$.params.pageToken")
        raise bad_params(loc, "is not a page token this gateway issued") from None
    include_artifacts = params.get("includeArtifacts") is True
    listed = [stored_task(task_out(row), "1.0", row["status_at"]) for row in rows]
    if not include_artifacts:
        for task in listed:
            if isinstance(task, dict):
                task.pop("artifacts", None)
    return {
        "tasks": listed,
        "nextPageToken": cursor or "",
        "pageSize": int(query["limit"]),
        "totalSize": int(total or 0),
    }


Method = Callable[[Call, JSON], Awaitable[object]]
# A streaming method yields results (streaming.Result, streaming.ErrorFrame); the first one
# is awaited before the stream is answered, so refusals before it are plain JSON-RPC errors.
StreamMethod = Callable[[Call, JSON], AsyncGenerator[Any]]
