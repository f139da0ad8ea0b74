"""A2A 1.0 requests as ProtoJSON: each field read under either of its names, kept under its
JSON name.

The proto3 JSON mapping has writers use a field's JSON name (``messageId``) and readers
accept that and the proto field name (``message_id``). The gateway reads 1.0 requests as
plain JSON, so it first puts every field of a known message under its JSON name, at every
depth the messages nest. What a field holds as free-form JSON (``metadata``, a data part's
``data``: a ``google.protobuf.Struct`` or ``Value``) is the client's own and is left as
written, and so is a member no message defines (the method's validation names it). A body
that gives one field under both names is refused: which of the two it means is unknowable.
"""

from __future__ import annotations

from typing import Any

# The request messages of A2A 1.0 (package lf.a2a.v1) and the messages they nest: each
# field's proto name, and the message its value holds (None: a scalar, an enum, a timestamp
# or free-form JSON).
MESSAGES: dict[str, dict[str, str | None]] = {
    "SendMessageRequest": {
        "tenant": None,
        "message": "Message",
        "configuration": "SendMessageConfiguration",
        "metadata": None,
    },
    "SendMessageConfiguration": {
        "accepted_output_modes": None,
        "task_push_notification_config": "TaskPushNotificationConfig",
        "history_length": None,
        "return_immediately": None,
    },
    "Message": {
        "message_id": None,
        "context_id": None,
        "task_id": None,
        "role": None,
        "parts": "Part",
        "metadata": None,
        "extensions": None,
        "reference_task_ids": None,
    },
    "Part": {
        "text": None,
        "raw": None,
        "url": None,
        "data": None,
        "metadata": None,
        "filename": None,
        "media_type": None,
    },
    "TaskPushNotificationConfig": {
        "tenant": None,
        "id": None,
        "task_id": None,
        "url": None,
        "token": None,
        "authentication": "AuthenticationInfo",
    },
    "AuthenticationInfo": {"scheme": None, "credentials": None},
    "GetTaskRequest": {"tenant": None, "id": None, "history_length": None},
    "ListTasksRequest": {
        "tenant": None,
        "context_id": None,
        "status": None,
        "page_size": None,
        "page_token": None,
        "history_length": None,
        "status_timestamp_after": None,
        "include_artifacts": None,
    },
    "CancelTaskRequest": {"tenant": None, "id": None, "metadata": None},
    "SubscribeToTaskRequest": {"tenant": None, "id": None},
    "GetTaskPushNotificationConfigRequest": {"tenant": None, "task_id": None, "id": None},
    "DeleteTaskPushNotificationConfigRequest": {"tenant": None, "task_id": None, "id": None},
    "ListTaskPushNotificationConfigsRequest": {
        "tenant": None,
        "task_id": None,
        "page_size": None,
        "page_token": None,
    },
    "GetExtendedAgentCardRequest": {"tenant": None},
}

# Fields the gateway also reads that 1.0 renamed: a send's webhook under 0.3's name.
ALSO_READ: dict[str, dict[str, str | None]] = {
    "SendMessageConfiguration": {"push_notification_config": "TaskPushNotificationConfig"},
}

# The request message of each 1.0 method.
REQUESTS = {
    "SendMessage": "SendMessageRequest",
    "SendStreamingMessage": "SendMessageRequest",
    "GetTask": "GetTaskRequest",
    "ListTasks": "ListTasksRequest",
    "CancelTask": "CancelTaskRequest",
    "SubscribeToTask": "SubscribeToTaskRequest",
    "CreateTaskPushNotificationConfig": "TaskPushNotificationConfig",
    "GetTaskPushNotificationConfig": "GetTaskPushNotificationConfigRequest",
    "ListTaskPushNotificationConfigs": "ListTaskPushNotificationConfigsRequest",
    "DeleteTaskPushNotificationConfig": "DeleteTaskPushNotificationConfigRequest",
    "GetExtendedAgentCard": "GetExtendedAgentCardRequest",
}


class BothNames(ValueError):
    """A body gives one field under its JSON name and its proto name."""

    def __init__(self, loc: str, first: str, second: str) -> None:
        self.loc = loc
        self.msg = f"is given twice, as {first} and {second}; give one of them"
        super().__init__(f"{loc}: {self.msg}")


def json_name(proto_name: str) -> str:
    """The JSON name protoc gives a field (``reference_task_ids`` → ``referenceTaskIds``)."""
    head, *rest = proto_name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


# One message as read: every name a field may come under → (proto name, JSON name, the
# shape of the message it holds or None).
Shape = dict[str, tuple[str, str, "Shape | None"]]


def _shapes() -> dict[str, Shape]:
    shapes: dict[str, Shape] = {name: {} for name in MESSAGES}
    for name, fields in MESSAGES.items():
        for proto, nested in {**fields, **ALSO_READ.get(name, {})}.items():
            entry = (proto, json_name(proto), shapes[nested] if nested else None)
            shapes[name][proto] = shapes[name][entry[1]] = entry
    return shapes


_SHAPES = _shapes()


def json_names(value: Any, message: str, loc: str = "$") -> Any:
    """``value``, the JSON of a ``message``, with every field under its JSON name at every
    depth (free-form JSON and unknown members as they are); raise BothNames for a field
    given under both names."""
    return _named(value, _SHAPES[message], loc)


def _named(value: Any, shape: Shape, loc: str) -> Any:
    if isinstance(value, list):
        return [_named(item, shape, f"{loc}[{i}]") for i, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        field = shape.get(key)
        if field is None:
            out[key] = item
            continue
        proto, name, nested = field
        if name in out:
            raise BothNames(f"{loc}.{name}", name if key == proto else proto, key)
        out[name] = item if nested is None else _named(item, nested, f"{loc}.{name}")
    return out
