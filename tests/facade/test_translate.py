"""Translation of A2A objects between 0.3 and 1.0, without HTTP."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from a2a_continue.facade import translate
from a2a_continue.facade.errors import RpcError, error_data, members_of

JSON = dict[str, Any]

TASK_V03: JSON = {
    "kind": "task",
    "id": "T",
    "contextId": "C",
    "status": {
        "state": "input-required",
        "message": {
            "kind": "message",
            "messageId": "m1",
            "role": "agent",
            "parts": [{"kind": "text", "text": "Which city?"}],
        },
        "timestamp": "2026-01-01T00:00:00Z",
    },
    "artifacts": [
        {
            "artifactId": "a1",
            "parts": [
                {"kind": "file", "file": {"uri": "https://x/y.png", "mimeType": "image/png"}},
                {"kind": "data", "data": {"t": 21}},
            ],
        }
    ],
    "history": [
        {
            "kind": "message",
            "messageId": "u1",
            "role": "user",
            "parts": [{"kind": "text", "text": "a"}],
        },
        {
            "kind": "message",
            "messageId": "u2",
            "role": "user",
            "parts": [{"kind": "text", "text": "b"}],
        },
    ],
    "metadata": {"x": 1},
}

TASK_V10: JSON = {
    "id": "T",
    "contextId": "C",
    "status": {
        "state": "TASK_STATE_INPUT_REQUIRED",
        "message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "Which city?"}]},
        "timestamp": "2026-01-01T00:00:00Z",
    },
    "artifacts": [
        {
            "artifactId": "a1",
            "parts": [{"url": "https://x/y.png", "mediaType": "image/png"}, {"data": {"t": 21}}],
        }
    ],
    "history": [
        {"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": "a"}]},
        {"messageId": "u2", "role": "ROLE_USER", "parts": [{"text": "b"}]},
    ],
    "metadata": {"x": 1},
}


def test_task_translates_both_ways() -> None:
    assert translate.task(TASK_V03, "1.0") == TASK_V10
    assert translate.task(TASK_V10, "0.3") == TASK_V03


@pytest.mark.parametrize("version", ["0.3", "1.0"])
def test_translating_to_the_same_version_changes_nothing(version: str) -> None:
    same = TASK_V03 if version == "0.3" else TASK_V10
    assert translate.task(same, version) == same


@pytest.mark.parametrize(
    ("v03", "v10"),
    [
        ("submitted", "TASK_STATE_SUBMITTED"),
        ("working", "TASK_STATE_WORKING"),
        ("input-required", "TASK_STATE_INPUT_REQUIRED"),
        ("auth-required", "TASK_STATE_AUTH_REQUIRED"),
        ("completed", "TASK_STATE_COMPLETED"),
        ("canceled", "TASK_STATE_CANCELED"),
        ("failed", "TASK_STATE_FAILED"),
        ("rejected", "TASK_STATE_REJECTED"),
        ("unknown", "TASK_STATE_UNSPECIFIED"),
    ],
)
def test_every_state_has_its_spelling_in_each_version(v03: str, v10: str) -> None:
    assert (translate.wire_state(v03, "1.0"), translate.wire_state(v10, "0.3")) == (v10, v03)


def test_roles_translate_and_unknown_roles_pass() -> None:
    assert translate.wire_role("agent", "1.0") == "ROLE_AGENT"
    assert translate.wire_role("ROLE_USER", "0.3") == "user"
    assert translate.wire_role("robot", "1.0") == "robot"


def test_history_length_keeps_the_last_messages() -> None:
    one = translate.task(TASK_V03, "1.0", history_length=1)
    assert isinstance(one, dict) and [m["messageId"] for m in one["history"]] == ["u2"]
    none = translate.task(TASK_V03, "1.0", history_length=0)
    assert isinstance(none, dict) and none["history"] == []


def test_send_result_is_wrapped_in_1_0_and_bare_with_kind_in_0_3() -> None:
    assert translate.result(TASK_V03, "1.0") == {"task": TASK_V10}
    assert translate.result({"task": TASK_V10}, "0.3") == TASK_V03
    msg10 = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}
    msg03 = {
        "kind": "message",
        "messageId": "m",
        "role": "agent",
        "parts": [{"kind": "text", "text": "hi"}],
    }
    assert translate.result({"message": msg10}, "0.3") == msg03
    assert translate.result(msg03, "1.0") == {"message": msg10}


def test_status_update_frames_carry_final_only_in_0_3() -> None:
    v10 = {
        "statusUpdate": {"taskId": "T", "contextId": "C", "status": {"state": "TASK_STATE_WORKING"}}
    }
    v03 = translate.result(v10, "0.3", final=False)
    assert v03 == {
        "kind": "status-update",
        "taskId": "T",
        "contextId": "C",
        "status": {"state": "working"},
        "final": False,
    }
    assert translate.result({**v03, "final": True}, "1.0") == {
        "statusUpdate": {"taskId": "T", "contextId": "C", "status": {"state": "TASK_STATE_WORKING"}}
    }


def test_artifact_update_frames_translate_their_parts() -> None:
    v03 = {
        "kind": "artifact-update",
        "taskId": "T",
        "artifact": {"artifactId": "a", "parts": [{"kind": "text", "text": "x"}]},
        "append": True,
    }
    assert translate.result(v03, "1.0") == {
        "artifactUpdate": {
            "taskId": "T",
            "artifact": {"artifactId": "a", "parts": [{"text": "x"}]},
            "append": True,
        }
    }


def test_unreadable_parts_and_results_pass_unchanged() -> None:
    assert translate.part({"kind": "video"}, "1.0") == {"kind": "video"}
    assert translate.result({"odd": 1}, "0.3") == {"odd": 1}


def test_error_members_are_an_object_in_0_3_and_error_info_in_1_0() -> None:
    error = RpcError(-32004, "terminal", state="completed", status=409)
    assert error.render("0.3")["data"] == {"state": "completed", "status": 409}
    [info] = error.render("1.0")["data"]
    assert info == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "UNSUPPORTED_OPERATION",
        "domain": "a2a-protocol.org",
        "metadata": {"state": "completed", "status": "409"},
    }
    assert members_of(error_data(-32004, {"state": "x"}, "1.0")) == {"state": "x"}


def test_timestamps_are_utc_with_z() -> None:
    at = dt.datetime(2026, 1, 2, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert translate.timestamp(at) == "2026-01-02T02:05:06Z"
