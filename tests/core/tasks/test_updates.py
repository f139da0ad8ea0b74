"""Updates an agent reports: parsing frames and snapshots, and applying them to a task (§8.1)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from a2a_continue.a2a import answers
from a2a_continue.a2a.answers import ARTIFACT, ERROR, MESSAGE, STATUS, TASK, ArtifactChunk, Update
from a2a_continue.a2a.protocol import AgentTask, ProtocolError
from a2a_continue.core.tasks.store import append_event, record_new_task, record_outcome
from a2a_continue.core.tasks.updates import merge_artifacts, record_update

JSON = dict[str, Any]


def frame(result: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": "r1", "result": result}


def parse_frame(body: object) -> Update:
    return answers.read(body, "1.0", frame=True)


def text_artifact(artifact_id: str, *texts: str, **extra: Any) -> JSON:
    return {"artifactId": artifact_id, "parts": [{"text": t} for t in texts], **extra}


# ---- parsing ------------------------------------------------------------------------------


def test_a_v10_status_update_frame_gives_the_canonical_state_and_message() -> None:
    message = {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "Which city?"}]}
    update = parse_frame(
        frame(
            {
                "statusUpdate": {
                    "taskId": "T",
                    "contextId": "C",
                    "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": message},
                }
            }
        )
    )
    assert (update.kind, update.task_id, update.context_id) == (STATUS, "T", "C")
    assert update.state == "input-required"
    assert update.status_message == message
    assert update.settles and not update.final


def test_a_v03_status_update_frame_carries_its_final_flag() -> None:
    update = parse_frame(
        frame(
            {
                "kind": "status-update",
                "taskId": "T",
                "contextId": "C",
                "status": {"state": "completed"},
                "final": True,
            }
        )
    )
    assert (update.kind, update.state, update.final) == (STATUS, "completed", True)


def test_artifact_update_frames_of_both_versions_keep_append_and_last_chunk() -> None:
    v10 = parse_frame(
        frame(
            {
                "artifactUpdate": {
                    "taskId": "T",
                    "artifact": text_artifact("a1", "more"),
                    "append": True,
                    "lastChunk": True,
                }
            }
        )
    )
    v03 = parse_frame(
        frame({"kind": "artifact-update", "taskId": "T", "artifact": text_artifact("a1", "x")})
    )
    assert v10.kind == v03.kind == ARTIFACT
    assert v10.artifacts == (ArtifactChunk(text_artifact("a1", "more"), True, True),)
    assert v03.artifacts == (ArtifactChunk(text_artifact("a1", "x"), False, False),)
    assert v10.state is None


def test_task_frames_of_both_versions_are_snapshots_with_every_artifact() -> None:
    task = {
        "id": "T",
        "contextId": "C",
        "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-01-01T00:00:00Z"},
        "artifacts": [text_artifact("a1", "x")],
    }
    v10 = parse_frame(frame({"task": task}))
    v03 = parse_frame(frame({"kind": "task", **task, "status": {"state": "working"}}))
    assert (v10.kind, v10.task_id, v10.state) == (TASK, "T", "working")
    assert v10.status_timestamp == "2026-01-01T00:00:00Z"
    assert v03.state == "working"
    assert [c.artifact for c in v10.artifacts] == [text_artifact("a1", "x")]
    assert parse_frame(frame(task)) == v10


def test_message_and_error_frames_are_read_as_such() -> None:
    message = parse_frame(frame({"message": {"messageId": "m", "parts": [{"text": "hi"}]}}))
    error = parse_frame({"jsonrpc": "2.0", "id": "r1", "error": {"code": -32001, "message": "no"}})
    assert message.kind == MESSAGE and message.state is None
    assert (error.kind, error.error_code, error.error_message) == (ERROR, -32001, "no")


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"id": "r1", "result": {}},
        {"jsonrpc": "2.0", "id": "r1"},
        frame({"statusUpdate": {"taskId": "T"}}),
        frame({"artifactUpdate": {"taskId": "T", "artifact": "x"}}),
        frame({"something": 1}),
        frame({"task": {"status": {"state": "working"}}}),
        {"jsonrpc": "2.0", "error": {"code": "x"}},
    ],
)
def test_frames_that_are_not_a2a_are_refused(body: Any) -> None:
    with pytest.raises(ProtocolError):
        parse_frame(body)


# ---- merging artifacts --------------------------------------------------------------------


def test_an_append_chunk_adds_its_parts_to_the_stored_artifact() -> None:
    stored = [text_artifact("a1", "Sunny"), text_artifact("a2", "x")]
    merged, changed = merge_artifacts(
        stored, (ArtifactChunk(text_artifact("a1", " in Paris"), True),)
    )
    assert merged == [text_artifact("a1", "Sunny", " in Paris"), text_artifact("a2", "x")]
    assert changed == ["a1"]


def test_a_chunk_without_append_replaces_the_stored_artifact() -> None:
    merged, changed = merge_artifacts(
        [text_artifact("a1", "old")], (ArtifactChunk(text_artifact("a1", "new")),)
    )
    assert merged == [text_artifact("a1", "new")]
    assert changed == ["a1"]


def test_an_unknown_artifact_id_is_added_and_an_equal_artifact_changes_nothing() -> None:
    stored = [text_artifact("a1", "x")]
    merged, changed = merge_artifacts(stored, (ArtifactChunk(text_artifact("a2", "y"), True),))
    assert merged == [text_artifact("a1", "x"), text_artifact("a2", "y")]
    assert changed == ["a2"]
    assert merge_artifacts(stored, (ArtifactChunk(text_artifact("a1", "x")),)) == (stored, [])


# ---- recording ----------------------------------------------------------------------------


@pytest.fixture
async def task_row(db: asyncpg.Connection) -> uuid.UUID:
    agent = uuid.uuid4()
    await db.execute(
        "INSERT INTO a2a_agents (id, name, endpoint_url, protocol_version, owner)"
        " VALUES ($1, 'w', 'http://127.0.0.1:9/', '1.0', 'alice@example.com')",
        agent,
    )
    row_id: uuid.UUID = await db.fetchval(
        "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, artifacts, last_seq)"
        " VALUES ($1, 'T', 'working', 'alice@example.com', '[]', 1) RETURNING id",
        agent,
    )
    await db.execute(
        "INSERT INTO a2a_task_events (task, seq, type, new_state, actor)"
        " VALUES ($1, 1, 'task_created', 'working', 'alice@example.com')",
        row_id,
    )
    return row_id


async def events(db: asyncpg.Connection, row_id: uuid.UUID) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT seq, type, previous_state, new_state, actor, data FROM a2a_task_events"
        " WHERE task = $1 ORDER BY seq",
        row_id,
    )


def status(state: str, message: JSON | None = None) -> Update:
    return Update(kind=STATUS, task_id="T", state=state, status_message=message)


def artifact(chunk: JSON, append: bool = False) -> Update:
    return Update(kind=ARTIFACT, task_id="T", artifacts=(ArtifactChunk(chunk, append),))


async def test_a_new_state_updates_the_row_and_appends_task_updated_with_its_source(
    db: asyncpg.Connection, task_row: uuid.UUID
) -> None:
    message = {"messageId": "m1", "parts": [{"text": "Which city?"}]}
    applied = await record_update(
        db, task_row, status("input-required", message), source="stream", actor="alice"
    )
    assert (applied.state, applied.seq) == ("input-required", 2)
    row = await db.fetchrow(
        "SELECT state, status_message, last_seq FROM a2a_tasks WHERE id = $1", task_row
    )
    assert dict(row) == {"state": "input-required", "status_message": message, "last_seq": 2}
    last = (await events(db, task_row))[-1]
    assert dict(last) == {
        "seq": 2,
        "type": "task_updated",
        "previous_state": "working",
        "new_state": "input-required",
        "actor": "alice",
        "data": {"source": "stream"},
    }


async def test_an_update_that_changes_nothing_appends_no_event(
    db: asyncpg.Connection, task_row: uuid.UUID
) -> None:
    await record_update(db, task_row, artifact(text_artifact("a1", "x")), source="poll", actor="g")
    for update in (status("working"), artifact(text_artifact("a1", "x")), Update(kind=MESSAGE)):
        applied = await record_update(db, task_row, update, source="poll", actor="g")
        assert applied.seq is None
    assert [e["seq"] for e in await events(db, task_row)] == [1, 2]


async def test_status_messages_compare_by_message_id_when_present_else_by_content(
    db: asyncpg.Connection, task_row: uuid.UUID
) -> None:
    first = {"messageId": "m1", "parts": [{"text": "Which city?"}]}
    await record_update(db, task_row, status("input-required", first), source="poll", actor="g")
    same_id = {"messageId": "m1", "parts": [{"text": "reworded"}]}
    assert (
        await record_update(
            db, task_row, status("input-required", same_id), source="poll", actor="g"
        )
    ).seq is None
    other_id = {"messageId": "m2", "parts": [{"text": "Which city?"}]}
    assert (
        await record_update(
            db, task_row, status("input-required", other_id), source="poll", actor="g"
        )
    ).seq == 3
    no_id = {"parts": [{"text": "Which town?"}]}
    assert (
        await record_update(db, task_row, status("input-required", no_id), source="poll", actor="g")
    ).seq == 4
    assert (
        await record_update(
            db, task_row, status("input-required", dict(no_id)), source="poll", actor="g"
        )
    ).seq is None
    changed = {"parts": [{"text": "Which village?"}]}
    assert (
        await record_update(
            db, task_row, status("input-required", changed), source="poll", actor="g"
        )
    ).seq == 5


async def test_artifact_chunks_append_and_name_the_changed_artifacts(
    db: asyncpg.Connection, task_row: uuid.UUID
) -> None:
    await record_update(
        db, task_row, artifact(text_artifact("a1", "Sunny")), source="stream", actor="g"
    )
    await record_update(
        db,
        task_row,
        artifact(text_artifact("a1", " in Paris"), append=True),
        source="stream",
        actor="g",
    )
    stored = await db.fetchval("SELECT artifacts FROM a2a_tasks WHERE id = $1", task_row)
    assert stored == [text_artifact("a1", "Sunny", " in Paris")]
    updates = [e for e in await events(db, task_row) if e["type"] == "task_updated"]
    assert [e["data"] for e in updates] == [
        {"source": "stream", "artifactIds": ["a1"]},
        {"source": "stream", "artifactIds": ["a1"]},
    ]
    assert all(e["previous_state"] == e["new_state"] == "working" for e in updates)


async def test_a_terminal_state_is_never_overwritten_by_an_update(
    db: asyncpg.Connection, task_row: uuid.UUID
) -> None:
    done = await record_update(db, task_row, status("completed"), source="subscribe", actor="g")
    assert done.state == "completed"
    completed_at = await db.fetchval("SELECT completed_at FROM a2a_tasks WHERE id = $1", task_row)
    assert completed_at is not None
    for update in (status("working"), artifact(text_artifact("a9", "late"))):
        applied = await record_update(db, task_row, update, source="poll", actor="g")
        assert (applied.state, applied.seq) == ("completed", None)
    row = await db.fetchrow(
        "SELECT state, artifacts, completed_at FROM a2a_tasks WHERE id = $1", task_row
    )
    assert dict(row) == {"state": "completed", "artifacts": [], "completed_at": completed_at}


async def test_an_always_update_logs_its_event_even_without_a_change(
    db: asyncpg.Connection, task_row: uuid.UUID
) -> None:
    applied = await record_update(
        db,
        task_row,
        status("working"),
        source="stream",
        actor="alice",
        event="task_continued",
        data={"messageId": "m"},
        always=True,
    )
    assert applied.seq == 2
    last = (await events(db, task_row))[-1]
    assert (last["type"], last["previous_state"], last["new_state"]) == (
        "task_continued",
        "working",
        "working",
    )
    assert last["data"] == {"source": "stream", "messageId": "m"}


async def test_an_unknown_source_is_refused(db: asyncpg.Connection, task_row: uuid.UUID) -> None:
    with pytest.raises(ValueError, match="source"):
        await record_update(db, task_row, status("working"), source="guess", actor="g")


# ---- notifications ------------------------------------------------------------------------


async def interest(db: asyncpg.Connection, row_id: uuid.UUID) -> None:
    """Make a stream (of some process) wait on the task, so its events notify."""
    await db.execute(
        "INSERT INTO a2a_stream_interest (task, process, expires_at)"
        " VALUES ($1, gen_random_uuid(), now() + interval '1 hour')",
        row_id,
    )


async def test_every_event_writer_notifies_listeners_with_the_task(
    db: asyncpg.Connection, task_row: uuid.UUID, notifications: asyncio.Queue[str]
) -> None:
    await interest(db, task_row)
    agent = await db.fetchval("SELECT agent_id FROM a2a_tasks WHERE id = $1", task_row)
    await append_event(db, task_row, "task_continued", "working", "working", "g", {})
    await record_outcome(db, task_row, state="working", event="task_continued", actor="g", data={})
    await record_update(db, task_row, status("input-required"), source="stream", actor="g")
    # A task created just now has no stream waiting on it yet: its first event notifies nobody.
    await record_new_task(db, agent, AgentTask("T2", None, "working", None, []), "alice", None, {})
    await append_event(db, task_row, "task_continued", "input-required", "working", "g", {})
    # Notifications arrive in commit order: one for T2 would come before the last.
    got = [await asyncio.wait_for(notifications.get(), 5) for _ in range(4)]
    assert got == [str(task_row)] * 4
    assert notifications.empty()


async def test_an_update_that_changes_nothing_notifies_nobody(
    db: asyncpg.Connection, task_row: uuid.UUID, notifications: asyncio.Queue[str]
) -> None:
    await interest(db, task_row)
    await record_update(db, task_row, status("working"), source="poll", actor="g")
    await append_event(db, task_row, "task_continued", "working", "working", "g", {})
    assert await asyncio.wait_for(notifications.get(), 5) == str(task_row)
    assert notifications.empty()
