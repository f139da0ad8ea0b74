"""A2A 0.3's HTTP+JSON shapes (the JSON of its protobuf messages) ↔ its JSON-RPC shapes.

The 0.3 REST binding carries the protobuf JSON: a message's parts are its ``content``,
parts have no ``kind`` (a file is ``fileWithUri``/``fileWithBytes``), states and roles are
``TASK_STATE_…``/``ROLE_…``, and a send's answer is wrapped (``{"task": …}``). The façade
reads a request into the JSON-RPC params of the 0.3 method and writes the method's 0.3
JSON-RPC result back in the protobuf JSON. Requests are read in either field spelling
(``message_id`` or ``messageId``), as protobuf JSON readers do; one field in both is refused.
"""

from __future__ import annotations

import re
from typing import Any

from a2a_continue.a2a.protojson import BothNames

JSON = dict[str, Any]

_STATES = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELLED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "unknown": "TASK_STATE_UNSPECIFIED",
}
_ROLES_IN = {"ROLE_USER": "user", "ROLE_AGENT": "agent", "user": "user", "agent": "agent"}
_ROLES_OUT = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_WRAPPERS = {
    "task": "task",
    "message": "message",
    "status-update": "statusUpdate",
    "artifact-update": "artifactUpdate",
}


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def camel_keys(obj: Any, loc: str = "$.params") -> Any:
    """The object with its keys in camelCase (``message_id`` → ``messageId``), all levels
    down except inside ``metadata`` and ``data`` (the client's own JSON); a key given in
    both spellings raises BothNames."""
    if isinstance(obj, list):
        return [camel_keys(v, f"{loc}[{i}]") for i, v in enumerate(obj)]
    if not isinstance(obj, dict):
        return obj
    out: JSON = {}
    for key, value in obj.items():
        name = _camel(key)
        if name in out:
            raise BothNames(f"{loc}.{name}", name if key != name else _snake(obj, name), key)
        out[name] = value if key in ("metadata", "data") else camel_keys(value, f"{loc}.{name}")
    return out


def _snake(obj: JSON, name: str) -> str:
    """The other spelling of ``name`` in ``obj``."""
    return next(k for k in obj if k != name and _camel(k) == name)


# ---- requests: protobuf JSON → the 0.3 JSON-RPC params -----------------------------------


def _part_in(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    out: JSON = {k: v for k, v in part.items() if k == "metadata"}
    if "text" in part:
        return {"kind": "text", "text": part["text"], **out}
    file = part.get("file")
    if isinstance(file, dict):
        content: JSON = {}
        if "fileWithUri" in file:
            content["uri"] = file["fileWithUri"]
        if "fileWithBytes" in file:
            content["bytes"] = file["fileWithBytes"]
        for key in ("mimeType", "name"):
            if key in file:
                content[key] = file[key]
        return {"kind": "file", "file": content, **out}
    data = part.get("data")
    if isinstance(data, dict) and isinstance(data.get("data"), dict):
        return {"kind": "data", "data": data["data"], **out}
    return part  # left for the method's validation to name


def message_in(message: Any) -> Any:
    """A message of a 0.3 REST request as the 0.3 JSON-RPC methods read it."""
    if not isinstance(message, dict):
        return message
    out = {k: v for k, v in message.items() if k not in ("content", "role")}
    out["kind"] = "message"
    if "role" in message:
        role = message["role"]
        out["role"] = _ROLES_IN.get(role, role) if isinstance(role, str) else role
    content = message.get("content", message.get("parts"))
    if content is not None:
        out["parts"] = [_part_in(p) for p in content] if isinstance(content, list) else content
    return out


def send_params(body: JSON) -> JSON:
    """``POST /v1/message:send|stream`` → the params of ``message/send|stream``."""
    body = camel_keys(body)
    params: JSON = {}
    message = body.get("message", body.get("request"))
    if message is not None:
        params["message"] = message_in(message)
    config = body.get("configuration")
    if isinstance(config, dict):
        # The protobuf names the webhook `pushNotification`; JSON-RPC `pushNotificationConfig`.
        params["configuration"] = {
            ("pushNotificationConfig" if k == "pushNotification" else k): v
            for k, v in config.items()
            if k != "pushNotification" or v is not None
        }
    if body.get("metadata") is not None:
        params["metadata"] = body["metadata"]
    return params


def push_config_in(body: JSON) -> JSON:
    """A push-notification config of a 0.3 REST request as the JSON-RPC params hold it."""
    body = camel_keys(body)
    config = body.get("config", body)
    if isinstance(config, dict) and "pushNotificationConfig" in config:
        config = config["pushNotificationConfig"]
    inner = dict(config) if isinstance(config, dict) else {}
    if not inner.get("id") and isinstance(body.get("configId"), str) and body["configId"]:
        inner["id"] = body["configId"]  # the request's `config_id`
    return inner


# ---- answers: 0.3 JSON-RPC results → protobuf JSON -------------------------------------------


def push_config_out(result: Any) -> Any:
    """A 0.3 JSON-RPC ``TaskPushNotificationConfig`` as the protobuf names it: its resource
    ``name`` (``tasks/{task_id}/pushNotificationConfigs/{config_id}``) and its config."""
    if not isinstance(result, dict) or not isinstance(result.get("pushNotificationConfig"), dict):
        return result
    inner = result["pushNotificationConfig"]
    name = f"tasks/{result.get('taskId')}/pushNotificationConfigs/{inner.get('id')}"
    return {"name": name, "pushNotificationConfig": inner}


def push_configs_out(result: Any) -> Any:
    """A 0.3 list of configs as its protobuf response: ``{"configs": […]}``."""
    configs = result if isinstance(result, list) else []
    return {"configs": [push_config_out(c) for c in configs]}


def _part_out(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    out: JSON = {k: v for k, v in part.items() if k == "metadata"}
    kind = part.get("kind")
    if kind == "text" or "text" in part:
        return {"text": part.get("text"), **out}
    if kind == "file" and isinstance(part.get("file"), dict):
        file = part["file"]
        content: JSON = {}
        if "uri" in file:
            content["fileWithUri"] = file["uri"]
        if "bytes" in file:
            content["fileWithBytes"] = file["bytes"]
        for key in ("mimeType", "name"):
            if key in file:
                content[key] = file[key]
        return {"file": content, **out}
    if kind == "data":
        return {"data": {"data": part.get("data")}, **out}
    return part


def message_out(message: Any) -> Any:
    """A 0.3 JSON-RPC message in the protobuf JSON."""
    if not isinstance(message, dict):
        return message
    out = {k: v for k, v in message.items() if k not in ("kind", "parts", "role")}
    if "role" in message:
        role = message["role"]
        out["role"] = _ROLES_OUT.get(role, role) if isinstance(role, str) else role
    if isinstance(message.get("parts"), list):
        out["content"] = [_part_out(p) for p in message["parts"]]
    return out


def _status_out(status: Any) -> Any:
    if not isinstance(status, dict):
        return status
    out = dict(status)
    state = status.get("state")
    out["state"] = _STATES.get(state, "TASK_STATE_UNSPECIFIED") if isinstance(state, str) else state
    if isinstance(status.get("message"), dict):
        out["message"] = message_out(status["message"])
    return out


def _artifact_out(artifact: Any) -> Any:
    if not isinstance(artifact, dict):
        return artifact
    out = dict(artifact)
    if isinstance(artifact.get("parts"), list):
        out["parts"] = [_part_out(p) for p in artifact["parts"]]
    return out


def task_out(task: Any) -> Any:
    """A 0.3 JSON-RPC task in the protobuf JSON."""
    if not isinstance(task, dict):
        return task
    out = {k: v for k, v in task.items() if k != "kind"}
    if "status" in task:
        out["status"] = _status_out(task["status"])
    if isinstance(task.get("artifacts"), list):
        out["artifacts"] = [_artifact_out(a) for a in task["artifacts"]]
    if isinstance(task.get("history"), list):
        out["history"] = [message_out(m) for m in task["history"]]
    return out


def _event_out(obj: JSON) -> JSON:
    out = {k: v for k, v in obj.items() if k != "kind"}
    if "status" in obj:
        out["status"] = _status_out(obj["status"])
    if "artifact" in obj:
        out["artifact"] = _artifact_out(obj["artifact"])
    return out


def result_out(result: Any) -> Any:
    """A send answer or a stream frame (0.3 JSON-RPC, with its ``kind``) as the protobuf JSON
    wraps it: ``{"task": …}``, ``{"message": …}``, ``{"statusUpdate": …}``, …"""
    if not isinstance(result, dict):
        return result
    kind = result.get("kind")
    if kind == "task":
        return {"task": task_out(result)}
    if kind == "message":
        return {"message": message_out(result)}
    if isinstance(kind, str) and kind in _WRAPPERS:
        return {_WRAPPERS[kind]: _event_out(result)}
    return result
