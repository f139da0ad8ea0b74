from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from a2a_continue.a2a import answers
from a2a_continue.a2a.protocol import (
    CANONICAL_STATES,
    INTERRUPTED_STATES,
    JSON,
    TERMINAL_STATES,
    AgentTask,
    ProtocolError,
    build_cancel_request,
    build_message,
    build_send_request,
    canonical_state,
    is_interrupted_task_state,
    is_terminal_task_state,
    new_rpc_id,
    to_v03_part,
    to_v10_part,
    wire_role,
)

# States

SPELLINGS: list[tuple[object, str]] = [
    ("submitted", "submitted"),
    ("TASK_STATE_SUBMITTED", "submitted"),
    ("working", "working"),
    ("TASK_STATE_WORKING", "working"),
    ("Working", "working"),
    ("input-required", "input-required"),
    ("input_required", "input-required"),
    ("INPUT-REQUIRED", "input-required"),
    ("INPUT_REQUIRED", "input-required"),
    ("TASK_STATE_INPUT_REQUIRED", "input-required"),
    ("Input-Required", "input-required"),
    ("auth-required", "auth-required"),
    ("auth_required", "auth-required"),
    ("TASK_STATE_AUTH_REQUIRED", "auth-required"),
    ("completed", "completed"),
    ("COMPLETED", "completed"),
    ("Completed", "completed"),
    ("TASK_STATE_COMPLETED", "completed"),
    ("task_state_completed", "completed"),
    ("  completed\n", "completed"),
    ("canceled", "canceled"),
    ("cancelled", "canceled"),
    ("CANCELLED", "canceled"),
    ("TASK_STATE_CANCELED", "canceled"),
    ("TASK_STATE_CANCELLED", "canceled"),
    ("failed", "failed"),
    ("TASK_STATE_FAILED", "failed"),
    ("rejected", "rejected"),
    ("TASK_STATE_REJECTED", "rejected"),
    ("unknown", "unknown"),
    ("TASK_STATE_UNSPECIFIED", "unknown"),
    ("", "unknown"),
    ("done", "unknown"),
    ("TASK_STATE_", "unknown"),
    (None, "unknown"),
    (3, "unknown"),
    (True, "unknown"),
    ({"state": "completed"}, "unknown"),
]

TERMINAL_SPELLINGS = [raw for raw, state in SPELLINGS if state in TERMINAL_STATES]
NON_TERMINAL_SPELLINGS = [raw for raw, state in SPELLINGS if state not in TERMINAL_STATES]
INTERRUPTED_SPELLINGS = [raw for raw, state in SPELLINGS if state in INTERRUPTED_STATES]
NON_INTERRUPTED_SPELLINGS = [raw for raw, state in SPELLINGS if state not in INTERRUPTED_STATES]


def test_state_sets_match_the_spec() -> None:
    assert CANONICAL_STATES == (
        "submitted",
        "working",
        "input-required",
        "auth-required",
        "completed",
        "canceled",
        "failed",
        "rejected",
        "unknown",
    )
    assert frozenset({"completed", "canceled", "failed", "rejected"}) == TERMINAL_STATES
    assert frozenset({"input-required", "auth-required"}) == INTERRUPTED_STATES


@pytest.mark.parametrize(("raw", "expected"), SPELLINGS)
def test_canonical_state_maps_every_spelling(raw: object, expected: str) -> None:
    assert canonical_state(raw) == expected


@pytest.mark.parametrize("state", CANONICAL_STATES)
def test_canonical_state_is_identity_on_canonical_states(state: str) -> None:
    assert canonical_state(state) == state


def test_canonical_state_maps_british_cancelled_to_canceled() -> None:
    assert canonical_state("cancelled") == "canceled"
    assert canonical_state("TASK_STATE_CANCELLED") == "canceled"


def test_canonical_state_maps_unspecified_and_garbage_to_unknown() -> None:
    assert canonical_state("TASK_STATE_UNSPECIFIED") == "unknown"
    assert canonical_state("paused") == "unknown"
    assert canonical_state(None) == "unknown"
    assert canonical_state(["completed"]) == "unknown"


@pytest.mark.parametrize("raw", TERMINAL_SPELLINGS)
def test_is_terminal_task_state_accepts_every_terminal_spelling(raw: object) -> None:
    assert is_terminal_task_state(raw)


@pytest.mark.parametrize("raw", NON_TERMINAL_SPELLINGS)
def test_is_terminal_task_state_rejects_every_non_terminal_spelling(raw: object) -> None:
    assert not is_terminal_task_state(raw)


@pytest.mark.parametrize("raw", INTERRUPTED_SPELLINGS)
def test_is_interrupted_task_state_accepts_input_and_auth_required(raw: object) -> None:
    assert is_interrupted_task_state(raw)


@pytest.mark.parametrize("raw", NON_INTERRUPTED_SPELLINGS)
def test_is_interrupted_task_state_rejects_every_other_state(raw: object) -> None:
    assert not is_interrupted_task_state(raw)


def test_wire_role_is_user_for_03_and_role_user_for_10() -> None:
    assert wire_role("0.3") == "user"
    assert wire_role("1.0") == "ROLE_USER"


def test_wire_role_rejects_an_unknown_version() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        wire_role("2.0")


def test_new_rpc_id_is_fresh_hex() -> None:
    first, second = new_rpc_id(), new_rpc_id()
    assert first != second
    assert 12 < len(first) <= 32
    int(first, 16)


# Parts: (0.3 shape, 1.0 shape) pairs that denote the same part

META = {"trace": "abc"}
PART_PAIRS: list[tuple[str, JSON, JSON]] = [
    ("text", {"kind": "text", "text": "Paris"}, {"text": "Paris"}),
    (
        "text+metadata",
        {"kind": "text", "text": "Paris", "metadata": META},
        {"text": "Paris", "metadata": META},
    ),
    (
        "file bytes",
        {"kind": "file", "file": {"bytes": "aGk="}},
        {"raw": "aGk="},
    ),
    (
        "file bytes+name+mime+metadata",
        {
            "kind": "file",
            "file": {"bytes": "aGk=", "name": "hi.txt", "mimeType": "text/plain"},
            "metadata": META,
        },
        {"raw": "aGk=", "filename": "hi.txt", "mediaType": "text/plain", "metadata": META},
    ),
    (
        "file uri",
        {"kind": "file", "file": {"uri": "https://x.test/a.pdf"}},
        {"url": "https://x.test/a.pdf"},
    ),
    (
        "file uri+name+mime+metadata",
        {
            "kind": "file",
            "file": {"uri": "https://x.test/a.pdf", "name": "a.pdf", "mimeType": "application/pdf"},
            "metadata": META,
        },
        {
            "url": "https://x.test/a.pdf",
            "filename": "a.pdf",
            "mediaType": "application/pdf",
            "metadata": META,
        },
    ),
    ("data", {"kind": "data", "data": {"city": "Paris"}}, {"data": {"city": "Paris"}}),
    (
        "data+metadata",
        {"kind": "data", "data": {"city": "Paris"}, "metadata": META},
        {"data": {"city": "Paris"}, "metadata": META},
    ),
]
PAIR_IDS = [name for name, _, _ in PART_PAIRS]


@pytest.mark.parametrize(("name", "v03", "v10"), PART_PAIRS, ids=PAIR_IDS)
def test_to_v10_part_converts_03_parts(name: str, v03: JSON, v10: JSON) -> None:
    assert to_v10_part(v03) == v10


@pytest.mark.parametrize(("name", "v03", "v10"), PART_PAIRS, ids=PAIR_IDS)
def test_to_v03_part_converts_10_parts(name: str, v03: JSON, v10: JSON) -> None:
    assert to_v03_part(v10) == v03


@pytest.mark.parametrize(("name", "v03", "v10"), PART_PAIRS, ids=PAIR_IDS)
def test_part_conversion_keeps_parts_already_in_the_target_shape(
    name: str, v03: JSON, v10: JSON
) -> None:
    assert to_v03_part(v03) == v03
    assert to_v10_part(v10) == v10


@pytest.mark.parametrize(("name", "v03", "v10"), PART_PAIRS, ids=PAIR_IDS)
def test_part_conversion_round_trips(name: str, v03: JSON, v10: JSON) -> None:
    assert to_v03_part(to_v10_part(v03)) == v03
    assert to_v10_part(to_v03_part(v10)) == v10


@pytest.mark.parametrize("value", [[1, 2], "plain", 7, None, True])
def test_to_v03_part_wraps_non_object_data_in_value(value: Any) -> None:
    assert to_v03_part({"data": value}) == {"kind": "data", "data": {"value": value}}


@pytest.mark.parametrize("value", [[1, 2], "plain", 7, None])
def test_to_v10_part_keeps_non_object_data_as_is(value: Any) -> None:
    assert to_v10_part({"data": value}) == {"data": value}


def test_to_v10_part_accepts_a_03_file_part_without_kind() -> None:
    assert to_v10_part({"file": {"uri": "https://x.test/f"}}) == {"url": "https://x.test/f"}


@pytest.mark.parametrize(
    "part",
    [
        {},
        {"metadata": META},
        {"text": "a", "data": {}},
        {"raw": "aGk=", "url": "https://x.test"},
        {"text": 5},
        {"kind": "image", "image": "x"},
        {"kind": "text"},
        {"kind": "data"},
        {"kind": "file"},
        {"kind": "file", "file": "x"},
        {"kind": "file", "file": {}},
        {"kind": "file", "file": {"bytes": "aGk=", "uri": "https://x.test"}},
        {"kind": "file", "file": {"bytes": 5}},
    ],
)
def test_part_conversion_rejects_unrecognisable_parts(part: JSON) -> None:
    with pytest.raises(ValueError):
        to_v03_part(part)
    with pytest.raises(ValueError):
        to_v10_part(part)


def test_part_conversion_rejects_a_non_object() -> None:
    with pytest.raises(ValueError):
        to_v10_part("Paris")  # type: ignore[arg-type]


# Requests: the literal payloads of SPEC §7


def test_build_message_10_matches_the_spec_follow_up() -> None:
    message = build_message(
        "1.0", message_id="M", task_id="T", context_id="C", parts=[{"text": "Paris"}]
    )
    assert message == {
        "messageId": "M",
        "role": "ROLE_USER",
        "taskId": "T",
        "contextId": "C",
        "parts": [{"text": "Paris"}],
    }


def test_build_message_03_matches_the_spec_follow_up() -> None:
    message = build_message(
        "0.3", message_id="M", task_id="T", context_id="C", parts=[{"text": "Paris"}]
    )
    assert message == {
        "kind": "message",
        "messageId": "M",
        "role": "user",
        "taskId": "T",
        "contextId": "C",
        "parts": [{"kind": "text", "text": "Paris"}],
    }


def test_build_message_omits_absent_optional_fields() -> None:
    for version in ("0.3", "1.0"):
        message = build_message(
            version, message_id="M", task_id=None, context_id=None, parts=[{"text": "hi"}]
        )
        assert set(message) - {"kind"} == {"messageId", "role", "parts"}


def test_build_message_carries_metadata_extensions_and_references() -> None:
    message = build_message(
        "1.0",
        message_id="M",
        task_id="T",
        context_id=None,
        parts=[{"kind": "file", "file": {"bytes": "aGk=", "name": "a"}}],
        metadata={"k": 1},
        extensions=["https://ext.test/x"],
        reference_task_ids=["T0"],
    )
    assert message == {
        "messageId": "M",
        "role": "ROLE_USER",
        "taskId": "T",
        "parts": [{"raw": "aGk=", "filename": "a"}],
        "metadata": {"k": 1},
        "extensions": ["https://ext.test/x"],
        "referenceTaskIds": ["T0"],
    }


def test_build_message_converts_10_parts_to_03_shape() -> None:
    message = build_message(
        "0.3",
        message_id="M",
        task_id="T",
        context_id="C",
        parts=[{"url": "https://x.test/a", "mediaType": "image/png"}, {"data": [1]}],
    )
    assert message["parts"] == [
        {"kind": "file", "file": {"uri": "https://x.test/a", "mimeType": "image/png"}},
        {"kind": "data", "data": {"value": [1]}},
    ]


def test_build_message_rejects_an_unknown_version() -> None:
    with pytest.raises(ValueError):
        build_message("0.2", message_id="M", task_id=None, context_id=None, parts=[])


def test_build_send_request_10_matches_the_spec() -> None:
    message = build_message(
        "1.0", message_id="M", task_id="T", context_id="C", parts=[{"text": "Paris"}]
    )
    assert build_send_request("1.0", "R", message) == {
        "jsonrpc": "2.0",
        "id": "R",
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "M",
                "role": "ROLE_USER",
                "taskId": "T",
                "contextId": "C",
                "parts": [{"text": "Paris"}],
            }
        },
    }


def test_build_send_request_03_matches_the_spec() -> None:
    message = build_message(
        "0.3", message_id="M", task_id="T", context_id="C", parts=[{"text": "Paris"}]
    )
    assert build_send_request("0.3", "R", message) == {
        "jsonrpc": "2.0",
        "id": "R",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": "M",
                "role": "user",
                "taskId": "T",
                "contextId": "C",
                "parts": [{"kind": "text", "text": "Paris"}],
            }
        },
    }


@pytest.mark.parametrize("version", ["0.3", "1.0"])
def test_build_send_request_carries_only_given_configuration_and_metadata(version: str) -> None:
    request = build_send_request(
        version,
        "R",
        {"messageId": "M"},
        configuration={"historyLength": 3, "acceptedOutputModes": None},
        metadata={"k": "v"},
    )
    assert request["params"] == {
        "message": {"messageId": "M"},
        "configuration": {"historyLength": 3},
        "metadata": {"k": "v"},
    }


@pytest.mark.parametrize("configuration", [None, {}, {"historyLength": None}])
def test_build_send_request_omits_empty_configuration(configuration: JSON | None) -> None:
    request = build_send_request("1.0", "R", {"messageId": "M"}, configuration=configuration)
    assert request["params"] == {"message": {"messageId": "M"}}


def test_build_cancel_request_03_uses_tasks_cancel() -> None:
    assert build_cancel_request("0.3", "R", "T") == {
        "jsonrpc": "2.0",
        "id": "R",
        "method": "tasks/cancel",
        "params": {"id": "T"},
    }


def test_build_cancel_request_10_uses_cancel_task() -> None:
    assert build_cancel_request("1.0", "R", "T") == {
        "jsonrpc": "2.0",
        "id": "R",
        "method": "CancelTask",
        "params": {"id": "T"},
    }


# Answers

ARTIFACT = {"artifactId": "A", "parts": [{"text": "Sunny"}]}
STATUS_MESSAGE = {"messageId": "S", "role": "ROLE_AGENT", "parts": [{"text": "Which city?"}]}
V10_TASK = {
    "id": "T",
    "contextId": "C",
    "status": {"state": "TASK_STATE_COMPLETED", "message": STATUS_MESSAGE},
    "artifacts": [ARTIFACT],
}
V03_TASK = {"kind": "task", "id": "T", "contextId": "C", "status": {"state": "completed"}}
V10_MESSAGE = {"messageId": "M", "role": "ROLE_AGENT", "parts": [{"text": "Hi"}]}
V03_MESSAGE = {"kind": "message", "messageId": "M", "role": "agent", "parts": []}


def rpc(result: object) -> JSON:
    return {"jsonrpc": "2.0", "id": "R", "result": result}


class AgentAnswer(NamedTuple):
    """A blocking answer as the reader reads it: a task, a message or a JSON-RPC error."""

    task: AgentTask | None
    message: JSON | None
    error_code: int | None
    error_message: str | None


def parse_answer(version: str, body: object) -> AgentAnswer:
    update = answers.read(body, version)
    message = update.raw if update.kind == answers.MESSAGE else None
    return AgentAnswer(update.answered, message, update.error_code, update.error_message)


def task_answer(task: AgentTask) -> AgentAnswer:
    return AgentAnswer(task=task, message=None, error_code=None, error_message=None)


def message_answer(message: JSON) -> AgentAnswer:
    return AgentAnswer(task=None, message=message, error_code=None, error_message=None)


COMPLETED_10 = AgentTask(
    id="T", context_id="C", state="completed", status_message=STATUS_MESSAGE, artifacts=[ARTIFACT]
)
COMPLETED_03 = AgentTask(
    id="T", context_id="C", state="completed", status_message=None, artifacts=[]
)


def test_parse_answer_10_reads_result_task() -> None:
    assert parse_answer("1.0", rpc({"task": V10_TASK})) == task_answer(COMPLETED_10)


def test_parse_answer_10_reads_result_message() -> None:
    assert parse_answer("1.0", rpc({"message": V10_MESSAGE})) == message_answer(V10_MESSAGE)


def test_parse_answer_10_reads_a_bare_task() -> None:
    assert parse_answer("1.0", rpc(V10_TASK)) == task_answer(COMPLETED_10)


def test_parse_answer_03_reads_kind_task() -> None:
    assert parse_answer("0.3", rpc(V03_TASK)) == task_answer(COMPLETED_03)


def test_parse_answer_03_reads_kind_message() -> None:
    assert parse_answer("0.3", rpc(V03_MESSAGE)) == message_answer(V03_MESSAGE)


def test_parse_answer_03_reads_a_task_without_kind() -> None:
    task = {"id": "T", "status": {"state": "input-required"}}
    expected = AgentTask(
        id="T", context_id=None, state="input-required", status_message=None, artifacts=[]
    )
    assert parse_answer("0.3", rpc(task)) == task_answer(expected)


def test_parse_answer_03_reads_a_message_without_kind() -> None:
    assert parse_answer("0.3", rpc(V10_MESSAGE)) == message_answer(V10_MESSAGE)


def test_parse_answer_reads_a_10_shape_from_a_03_agent() -> None:
    assert parse_answer("0.3", rpc({"task": V10_TASK})) == task_answer(COMPLETED_10)
    assert parse_answer("0.3", rpc({"message": V10_MESSAGE})) == message_answer(V10_MESSAGE)


def test_parse_answer_reads_a_03_shape_from_a_10_agent() -> None:
    assert parse_answer("1.0", rpc(V03_TASK)) == task_answer(COMPLETED_03)
    assert parse_answer("1.0", rpc(V03_MESSAGE)) == message_answer(V03_MESSAGE)


def test_parse_answer_makes_the_task_state_canonical() -> None:
    task = {"id": "T", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}
    answer = parse_answer("1.0", rpc({"task": task}))
    assert answer.task is not None
    assert answer.task.state == "input-required"


def test_parse_answer_gives_unknown_state_when_status_has_none() -> None:
    answer = parse_answer("1.0", rpc({"task": {"id": "T", "status": {}}}))
    assert answer.task is not None
    assert answer.task.state == "unknown"


def test_parse_answer_ignores_a_malformed_status_message_and_artifacts() -> None:
    task = {"id": "T", "status": {"state": "working", "message": "hi"}, "artifacts": "x"}
    answer = parse_answer("1.0", rpc({"task": task}))
    assert answer.task == AgentTask(
        id="T", context_id=None, state="working", status_message=None, artifacts=[]
    )


def test_parse_answer_reads_a_json_rpc_error() -> None:
    body = {"jsonrpc": "2.0", "id": "R", "error": {"code": -32001, "message": "Task not found"}}
    assert parse_answer("1.0", body) == AgentAnswer(
        task=None, message=None, error_code=-32001, error_message="Task not found"
    )


def test_parse_answer_reads_an_error_without_a_message() -> None:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32602}}
    answer = parse_answer("0.3", body)
    assert (answer.error_code, answer.error_message) == (-32602, None)


MALFORMED: list[tuple[str, object]] = [
    ("not an object", ["jsonrpc"]),
    ("null", None),
    ("jsonrpc missing", {"id": "R", "result": V10_TASK}),
    ("jsonrpc wrong", {"jsonrpc": "1.0", "id": "R", "result": V10_TASK}),
    ("neither result nor error", {"jsonrpc": "2.0", "id": "R"}),
    ("error not an object", {"jsonrpc": "2.0", "id": "R", "error": "boom"}),
    ("error code missing", {"jsonrpc": "2.0", "id": "R", "error": {"message": "x"}}),
    ("error code a string", {"jsonrpc": "2.0", "id": "R", "error": {"code": "-32001"}}),
    ("error code a bool", {"jsonrpc": "2.0", "id": "R", "error": {"code": True}}),
    ("result null", rpc(None)),
    ("result a list", rpc([V10_TASK])),
    ("result a string", rpc("done")),
    ("result empty", rpc({})),
    ("result unknown kind", rpc({"kind": "status-update", "taskId": "T"})),
    ("task not an object", rpc({"task": "T"})),
    ("task without id", rpc({"task": {"status": {"state": "working"}}})),
    ("task with int id", rpc({"task": {"id": 1, "status": {"state": "working"}}})),
    ("task without status", rpc({"task": {"id": "T"}})),
    ("task status not an object", rpc({"task": {"id": "T", "status": "working"}})),
    ("task with int contextId", rpc({"task": {"id": "T", "contextId": 2, "status": {}}})),
    ("03 task without id", rpc({"kind": "task", "status": {"state": "working"}})),
    ("03 task without status", rpc({"kind": "task", "id": "T"})),
    ("bare task with null id", rpc({"id": None, "status": {}})),
    ("message not an object", rpc({"message": "hi"})),
]


@pytest.mark.parametrize(
    "body", [body for _, body in MALFORMED], ids=[name for name, _ in MALFORMED]
)
@pytest.mark.parametrize("version", ["0.3", "1.0"])
def test_parse_answer_raises_protocol_error_on_malformed_bodies(version: str, body: object) -> None:
    with pytest.raises(ProtocolError):
        parse_answer(version, body)


def test_protocol_error_is_a_value_error() -> None:
    assert issubclass(ProtocolError, ValueError)
