"""Push notifications at the façade (SPEC §12): the config methods of both versions, configs
given inline on a send, and what a delivery carries in each version."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from a2a_continue.a2a import answers
from a2a_continue.core.push import configs as pc
from a2a_continue.core.push.deliveries import decode_snapshot
from a2a_continue.facade import translate
from a2a_continue.facade.context import Call
from a2a_continue.facade.errors import INVALID_PARAMS, RpcError
from a2a_continue.runtime.db import Record

JSON = dict[str, Any]


def _bad(loc: str, msg: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"{loc}: {msg}", errors=[{"loc": loc, "msg": msg}])


def _string(params: JSON, name: str, loc: str, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        if required:
            raise _bad(f"{loc}.{name}", "is required")
        return None
    if not isinstance(value, str):
        raise _bad(f"{loc}.{name}", "must be a string")
    return value


def read_config(value: object, version: str, loc: str) -> tuple[str | None, pc.PushConfigCreate]:
    """A push config as a client of ``version`` writes it: (its id or None, the config)."""
    if not isinstance(value, dict):
        raise _bad(loc, "must be an object")
    auth = value.get("authentication")
    body: JSON = {"url": value.get("url"), "version": version}
    if value.get("token") not in (None, ""):
        body["token"] = value["token"]
    if isinstance(auth, dict):
        # 0.3 lists `schemes`; 1.0 names one `scheme`.
        schemes = auth.get("schemes")
        scheme = auth.get("scheme") or (
            schemes[0] if isinstance(schemes, list) and schemes else None
        )
        if scheme:
            body["authentication"] = {"scheme": scheme}
            if auth.get("credentials"):
                body["authentication"]["credentials"] = auth["credentials"]
    elif auth is not None:
        raise _bad(f"{loc}.authentication", "must be an object")
    config_id = _string(value, "id", loc, required=False)
    if config_id is not None and len(config_id) > pc.CONFIG_ID_MAX:
        raise _bad(f"{loc}.id", f"must be at most {pc.CONFIG_ID_MAX} characters")
    return config_id, pc.decode_config(body, loc)


def shown(config: pc.PushConfigOut, task_id: str, version: str) -> JSON:
    """A config as the client's version shows it (never its token or credentials)."""
    inner: JSON = {"id": config.id, "url": config.url}
    if config.authentication is not None:
        scheme = config.authentication.scheme
        inner["authentication"] = {"scheme": scheme} if version == "1.0" else {"schemes": [scheme]}
    if version == "1.0":
        return {"taskId": task_id, **inner}
    return {"taskId": task_id, "pushNotificationConfig": inner}


def check_inline(call: Call, value: object) -> None:
    """Refuse a send's inline config before the agent is called (shape, address, secrets)."""
    _, body = read_config(value, call.version, "$.params.configuration")
    pc.checked_url(body.url, call.gw.settings.push_networks)
    pc.check_secrets(body)


async def create_inline(call: Call, task_id: str, value: object, *, deliver_task: bool) -> None:
    """Create the config a send carried, for the task the send is about."""
    config_id, body = read_config(value, call.version, "$.params.configuration")
    async with call.gw.connection() as conn:
        await pc.create_config(
            conn,
            call.caller,
            call.agent_id,
            task_id,
            body,
            call.gw.sealer,
            call.gw.settings.push_networks,
            config_id=config_id,
            deliver_task=deliver_task,
        )


def inline_config(params: JSON) -> object | None:
    """The push config a send's configuration carries (either version's name), or None."""
    config = params.get("configuration")
    if not isinstance(config, dict):
        return None
    for name in ("taskPushNotificationConfig", "pushNotificationConfig"):
        value: object = config.get(name)
        if value is not None:
            return value
    return None


def without_inline(params: JSON) -> JSON:
    """The send's params without its push config (the agent never sees the webhook)."""
    config = params.get("configuration")
    if not isinstance(config, dict):
        return params
    rest = {k: v for k, v in config.items() if k not in ("taskPushNotificationConfig",
                                                          "pushNotificationConfig")}  # fmt: skip
    return {**params, "configuration": rest}


async def create(call: Call, params: JSON) -> object:
    """CreateTaskPushNotificationConfig / tasks/pushNotificationConfig/set."""
    task_id = _string(params, "taskId", "$.params")
    assert task_id is not None
    if call.version == "1.0":
        config_id, body = read_config(params, "1.0", "$.params")
    else:
        config_id, body = read_config(params.get("pushNotificationConfig"), "0.3",
                                      "$.params.pushNotificationConfig")  # fmt: skip
    async with call.gw.connection() as conn:
        config = await pc.create_config(
            conn,
            call.caller,
            call.agent_id,
            task_id,
            body,
            call.gw.sealer,
            call.gw.settings.push_networks,
            config_id=config_id,
        )
    return shown(config, task_id, call.version)


def _task_and_config(params: JSON, version: str) -> tuple[str, str | None]:
    if version == "1.0":
        task_id = _string(params, "taskId", "$.params")
        config_id = _string(params, "id", "$.params", required=False)
    else:
        task_id = _string(params, "id", "$.params")
        config_id = _string(params, "pushNotificationConfigId", "$.params", required=False)
    assert task_id is not None
    return task_id, config_id


async def get(call: Call, params: JSON) -> object:
    """GetTaskPushNotificationConfig / tasks/pushNotificationConfig/get (0.3 without an id:
    the task's first config)."""
    task_id, config_id = _task_and_config(params, call.version)
    async with call.gw.connection() as conn:
        if config_id is None:
            if call.version == "1.0":
                raise _bad("$.params.id", "is required")
            listed = await pc.list_configs(conn, call.caller, call.agent_id, task_id)
            if not listed.configs:
                raise RpcError(INVALID_PARAMS, f"task {task_id} has no push config")
            config = listed.configs[0]
        else:
            config = await pc.get_config(conn, call.caller, call.agent_id, task_id, config_id)
    return shown(config, task_id, call.version)


async def list_(call: Call, params: JSON) -> object:
    """ListTaskPushNotificationConfigs / tasks/pushNotificationConfig/list."""
    task_id = _string(params, "taskId" if call.version == "1.0" else "id", "$.params")
    assert task_id is not None
    async with call.gw.connection() as conn:
        listed = await pc.list_configs(conn, call.caller, call.agent_id, task_id)
    configs = [shown(c, task_id, call.version) for c in listed.configs]
    if call.version == "1.0":
        return {"configs": configs, "nextPageToken": ""}
    return configs


async def delete(call: Call, params: JSON) -> object:
    """DeleteTaskPushNotificationConfig / tasks/pushNotificationConfig/delete (idempotent)."""
    task_id, config_id = _task_and_config(params, call.version)
    if config_id is None:
        raise _bad("$.params.id" if call.version == "1.0" else "$.params.pushNotificationConfigId",
                   "is required")  # fmt: skip
    async with call.gw.connection() as conn:
        await pc.delete_config(conn, call.caller, call.agent_id, task_id, config_id)
    return {} if call.version == "1.0" else None


# ---- what a delivery carries ---------------------------------------------------------------


def _status(snapshot: JSON, at: dt.datetime) -> JSON:
    status: JSON = {"state": snapshot.get("state"), "timestamp": translate.timestamp(at)}
    if snapshot.get("statusMessage") is not None:
        status["message"] = snapshot["statusMessage"]
    return status


def delivery_body(row: Record) -> bytes:
    """The body of one delivery: 1.0 one StreamResponse (the task, a status update or an
    artifact update), 0.3 the whole task; the task as it was when the event was recorded."""
    snapshot = decode_snapshot(row["snapshot"])
    version, kind = row["version"], row["kind"]
    ids: JSON = {"taskId": row["task_id"]}
    if row["context_id"] is not None:
        ids["contextId"] = row["context_id"]
    status = _status(snapshot, row["created_at"])
    if kind == "status":
        frame: object = translate.shaped(answers.STATUS, {**ids, "status": status}, version,
                                         final=False)  # fmt: skip
    elif kind == "artifact":
        update = {**ids, "artifact": snapshot.get("artifact"), "append": False, "lastChunk": True}
        frame = translate.shaped(answers.ARTIFACT, update, version)
    else:
        task: JSON = {"id": row["task_id"], "status": status,
                      "artifacts": snapshot.get("artifacts") or []}  # fmt: skip
        if row["context_id"] is not None:
            task["contextId"] = row["context_id"]
        frame = translate.shaped(answers.TASK, task, version)
    return msgspec.json.encode(frame)
