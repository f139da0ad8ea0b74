"""A2A 0.3's protobuf JSON (its HTTP+JSON binding) read into, and written from, its JSON-RPC
shapes: parts of every kind, roles, states, and the wrapping of answers."""

from __future__ import annotations

import pytest

from a2a_continue.a2a.protojson import BothNames
from a2a_continue.facade import rest03


def test_a_send_in_protobuf_json_reads_as_message_send_params() -> None:
    body = {
        "request": {
            "message_id": "m-1",
            "context_id": "C1",
            "task_id": "T1",
            "role": "ROLE_USER",
            "content": [
                {"text": "weather?"},
                {"file": {"file_with_uri": "https://x/y.png", "mime_type": "image/png"}},
                {"file": {"fileWithBytes": "aGk=", "name": "hi.txt"}},
                {"data": {"data": {"city": "Paris", "snake_key": 1}}},
            ],
            "metadata": {"trace_id": "keep-me"},
        },
        "configuration": {"history_length": 2, "blocking": True},
    }
    params = rest03.send_params(body)
    message = params["message"]
    assert {k: message[k] for k in ("kind", "messageId", "contextId", "taskId", "role")} == {
        "kind": "message",
        "messageId": "m-1",
        "contextId": "C1",
        "taskId": "T1",
        "role": "user",
    }
    assert message["parts"] == [
        {"kind": "text", "text": "weather?"},
        {"kind": "file", "file": {"uri": "https://x/y.png", "mimeType": "image/png"}},
        {"kind": "file", "file": {"bytes": "aGk=", "name": "hi.txt"}},
        {"kind": "data", "data": {"city": "Paris", "snake_key": 1}},
    ]
    assert message["metadata"] == {"trace_id": "keep-me"}  # the client's own keys, untouched
    assert params["configuration"] == {"historyLength": 2, "blocking": True}


def test_a_field_in_both_spellings_is_refused_but_free_form_json_is_the_client_s() -> None:
    message = {"content": [{"text": "hi"}], "metadata": {"trace_id": 1, "traceId": 2}}
    assert rest03.send_params({"message": message})["message"]["metadata"] == {
        "trace_id": 1,
        "traceId": 2,
    }
    body = {"configuration": {"accepted_output_modes": [], "acceptedOutputModes": []}}
    with pytest.raises(BothNames) as refused:
        rest03.send_params(body)
    assert refused.value.loc == "$.params.configuration.acceptedOutputModes"
    assert refused.value.msg.startswith(
        "is given twice, as accepted_output_modes and acceptedOutputModes"
    )


def test_a_task_is_written_in_protobuf_json() -> None:
    task = {
        "kind": "task",
        "id": "T1",
        "contextId": "C1",
        "status": {
            "state": "canceled",
            "message": {
                "kind": "message",
                "messageId": "a-1",
                "role": "agent",
                "parts": [{"kind": "text", "text": "Stopped."}],
            },
        },
        "artifacts": [
            {"artifactId": "A1", "parts": [{"kind": "data", "data": {"t": 21}}]},
        ],
        "history": [
            {
                "kind": "message",
                "messageId": "u-1",
                "role": "user",
                "parts": [{"kind": "file", "file": {"uri": "https://x/y"}}],
            }
        ],
    }
    out = rest03.result_out(task)
    assert out == {
        "task": {
            "id": "T1",
            "contextId": "C1",
            "status": {
                "state": "TASK_STATE_CANCELLED",  # 0.3's protobuf spelling
                "message": {
                    "messageId": "a-1",
                    "role": "ROLE_AGENT",
                    "content": [{"text": "Stopped."}],
                },
            },
            "artifacts": [{"artifactId": "A1", "parts": [{"data": {"data": {"t": 21}}}]}],
            "history": [
                {
                    "messageId": "u-1",
                    "role": "ROLE_USER",
                    "content": [{"file": {"fileWithUri": "https://x/y"}}],
                }
            ],
        }
    }


def test_stream_events_are_wrapped_by_what_they_are() -> None:
    status = {
        "kind": "status-update",
        "taskId": "T1",
        "contextId": "C1",
        "status": {"state": "input-required"},
        "final": True,
    }
    artifact = {
        "kind": "artifact-update",
        "taskId": "T1",
        "artifact": {"artifactId": "A", "parts": [{"kind": "text", "text": "x"}]},
    }
    assert rest03.result_out(status) == {
        "statusUpdate": {
            "taskId": "T1",
            "contextId": "C1",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
            "final": True,
        }
    }
    assert rest03.result_out(artifact) == {
        "artifactUpdate": {
            "taskId": "T1",
            "artifact": {"artifactId": "A", "parts": [{"text": "x"}]},
        }
    }
    message = {"kind": "message", "messageId": "m", "role": "agent", "parts": []}
    assert rest03.result_out(message) == {
        "message": {"messageId": "m", "role": "ROLE_AGENT", "content": []}
    }
