"""A2A 1.0 requests as ProtoJSON: every field read under its proto name or its JSON name, at
every depth, free-form JSON left alone, a field under both names refused."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format
from google.protobuf.message import Message as Proto
from google.protobuf.struct_pb2 import Struct, Value
from google.protobuf.timestamp_pb2 import Timestamp

from a2a_continue.a2a import protojson

JSON = dict[str, Any]


def _struct(**members: Any) -> Struct:
    out = Struct()
    out.update(members)
    return out


def _config() -> pb.TaskPushNotificationConfig:
    auth = pb.AuthenticationInfo(scheme="Bearer", credentials="secret-c")
    return pb.TaskPushNotificationConfig(
        tenant="t",
        id="c1",
        task_id="T1",
        url="https://hooks.example.com/a2a",
        token="tok",
        authentication=auth,
    )


def _message() -> pb.Message:
    data = Value(struct_value=_struct(city_name="Paris", nested_map={"unit_system": "metric"}))
    parts = [
        pb.Part(text="weather?", metadata=_struct(part_note=1)),
        pb.Part(data=data, media_type="application/json", filename="where.json"),
        pb.Part(url="https://example.com/a.png", media_type="image/png"),
        pb.Part(raw=b"\x00\x01", media_type="application/octet-stream"),
    ]
    return pb.Message(
        message_id="m1",
        context_id="C1",
        task_id="T1",
        role=pb.Role.ROLE_USER,
        parts=parts,
        metadata=_struct(trace_id="x1"),
        extensions=["https://ext.example/a"],
        reference_task_ids=["T0"],
    )


def _send() -> pb.SendMessageRequest:
    configuration = pb.SendMessageConfiguration(
        accepted_output_modes=["text/plain"],
        task_push_notification_config=_config(),
        history_length=2,
        return_immediately=True,
    )
    return pb.SendMessageRequest(
        tenant="t",
        message=_message(),
        configuration=configuration,
        metadata=_struct(client_hint="yes"),
    )


# One request of every 1.0 method, every field set, as an a2a-sdk user builds it.
REQUESTS: dict[str, Proto] = {
    "SendMessage": _send(),
    "SendStreamingMessage": _send(),
    "GetTask": pb.GetTaskRequest(tenant="t", id="T1", history_length=3),
    "ListTasks": pb.ListTasksRequest(
        tenant="t",
        context_id="C1",
        status=pb.TaskState.TASK_STATE_WORKING,
        page_size=10,
        page_token="p",
        history_length=1,
        status_timestamp_after=Timestamp(seconds=1),
        include_artifacts=True,
    ),
    "CancelTask": pb.CancelTaskRequest(tenant="t", id="T1", metadata=_struct(why_not="x")),
    "SubscribeToTask": pb.SubscribeToTaskRequest(tenant="t", id="T1"),
    "CreateTaskPushNotificationConfig": _config(),
    "GetTaskPushNotificationConfig": pb.GetTaskPushNotificationConfigRequest(
        tenant="t", task_id="T1", id="c1"
    ),
    "ListTaskPushNotificationConfigs": pb.ListTaskPushNotificationConfigsRequest(
        tenant="t", task_id="T1", page_size=5, page_token="p"
    ),
    "DeleteTaskPushNotificationConfig": pb.DeleteTaskPushNotificationConfigRequest(
        tenant="t", task_id="T1", id="c1"
    ),
    "GetExtendedAgentCard": pb.GetExtendedAgentCardRequest(tenant="t"),
}


def _fields(name: str) -> dict[str, tuple[str, str | None]]:
    """A message of the SDK's descriptors: proto name → (JSON name, nested A2A message)."""
    descriptor = pb.DESCRIPTOR.message_types_by_name[name]
    out = {}
    for field in descriptor.fields:
        nested = field.message_type
        a2a = nested is not None and nested.full_name.startswith("lf.a2a.v1.")
        out[field.name] = (field.json_name, nested.name if a2a else None)
    return out


@pytest.mark.parametrize("name", sorted(protojson.MESSAGES))
def test_each_message_has_the_fields_of_the_a2a_1_0_proto(name: str) -> None:
    known = {
        proto: (protojson.json_name(proto), nested)
        for proto, nested in protojson.MESSAGES[name].items()
    }
    assert known == _fields(name)


def test_every_1_0_method_reads_the_request_message_of_the_proto() -> None:
    [service] = pb.DESCRIPTOR.services_by_name.values()
    assert {m.name: m.input_type.name for m in service.methods} == protojson.REQUESTS


def test_the_names_read_beyond_the_proto_are_0_3_names_that_1_0_renamed() -> None:
    assert protojson.ALSO_READ == {
        "SendMessageConfiguration": {"push_notification_config": "TaskPushNotificationConfig"}
    }


@pytest.mark.parametrize("method", sorted(REQUESTS))
def test_a_request_in_proto_names_reads_as_the_sdk_writes_it_in_json_names(method: str) -> None:
    request = REQUESTS[method]
    proto_names = json_format.MessageToDict(request, preserving_proto_field_name=True)
    # Only these requests have no field whose two names differ.
    same = method in ("SubscribeToTask", "GetExtendedAgentCard", "CancelTask")
    assert (proto_names == json_format.MessageToDict(request)) == same
    read = protojson.json_names(proto_names, protojson.REQUESTS[method], "$.params")
    assert read == json_format.MessageToDict(request)


@pytest.mark.parametrize("method", sorted(REQUESTS))
def test_a_request_in_json_names_is_read_unchanged(method: str) -> None:
    body = json_format.MessageToDict(REQUESTS[method])
    assert protojson.json_names(body, protojson.REQUESTS[method]) == body


def test_free_form_json_keeps_the_names_the_client_gave() -> None:
    metadata = {"trace_id": "x", "nested_map": {"unit_system": "metric", "unitSystem": "both"}}
    body = {
        "metadata": metadata,
        "message": {
            "message_id": "m1",
            "metadata": metadata,
            "parts": [{"data": {"city_name": "Paris", "cityName": "also"}, "metadata": metadata}],
        },
    }
    read = protojson.json_names(body, "SendMessageRequest")
    assert read == {
        "metadata": metadata,
        "message": {
            "messageId": "m1",
            "metadata": metadata,
            "parts": [{"data": {"city_name": "Paris", "cityName": "also"}, "metadata": metadata}],
        },
    }


def test_members_no_message_defines_are_left_for_validation_to_name() -> None:
    body = {"message": {"message_id": "m1", "not_a_field": 1, "kind": "message"}, "extra_top": 2}
    read = protojson.json_names(body, "SendMessageRequest")
    assert read == {
        "message": {"messageId": "m1", "not_a_field": 1, "kind": "message"},
        "extra_top": 2,
    }


def test_values_of_the_wrong_shape_are_left_for_validation_to_name() -> None:
    body = {"message": "text", "configuration": ["history_length"], "tenant": {"page_size": 1}}
    assert protojson.json_names(body, "SendMessageRequest") == body


def test_a_send_s_webhook_is_read_under_its_0_3_name_too() -> None:
    body = {"configuration": {"push_notification_config": {"url": "u", "task_id": "T1"}}}
    read = protojson.json_names(body, "SendMessageRequest")
    assert read == {"configuration": {"pushNotificationConfig": {"url": "u", "taskId": "T1"}}}


@pytest.mark.parametrize(
    ("message", "body", "loc", "names"),
    [
        (
            "ListTasksRequest",
            {"page_size": 1, "pageSize": 2},
            "$.params.pageSize",
            "page_size and pageSize",
        ),
        (
            "ListTasksRequest",
            {"contextId": "a", "context_id": "b"},
            "$.params.contextId",
            "contextId and context_id",
        ),
        (
            "SendMessageRequest",
            {"message": {"message_id": "a", "messageId": "b"}},
            "$.params.message.messageId",
            "message_id and messageId",
        ),
        (
            "SendMessageRequest",
            {"message": {"parts": [{"text": "a"}, {"media_type": "x", "mediaType": "y"}]}},
            "$.params.message.parts[1].mediaType",
            "media_type and mediaType",
        ),
        (
            "SendMessageRequest",
            {"configuration": {"taskPushNotificationConfig": {"task_id": "a", "taskId": "b"}}},
            "$.params.configuration.taskPushNotificationConfig.taskId",
            "task_id and taskId",
        ),
        (
            "SendMessageRequest",
            {
                "configuration": {
                    "task_push_notification_config": {},
                    "taskPushNotificationConfig": {},
                }
            },
            "$.params.configuration.taskPushNotificationConfig",
            "task_push_notification_config and taskPushNotificationConfig",
        ),
        # the same value under both names is still two fields
        (
            "TaskPushNotificationConfig",
            {"task_id": "T1", "taskId": "T1"},
            "$.params.taskId",
            "task_id and taskId",
        ),
    ],
)
def test_a_field_under_both_names_is_refused_naming_where(
    message: str, body: JSON, loc: str, names: str
) -> None:
    with pytest.raises(protojson.BothNames) as refused:
        protojson.json_names(body, message, "$.params")
    assert refused.value.loc == loc
    assert refused.value.msg == f"is given twice, as {names}; give one of them"


def test_json_names_are_the_ones_protoc_gives() -> None:
    names = ["message_id", "reference_task_ids", "oauth2_metadata_url", "id", "status"]
    assert [protojson.json_name(n) for n in names] == [
        "messageId",
        "referenceTaskIds",
        "oauth2MetadataUrl",
        "id",
        "status",
    ]
