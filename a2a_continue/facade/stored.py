"""Tasks as the façade shows them from the store, and the one time of a task's status.

The gateway records when a task's status (its state and message) last changed (`status_at`,
sql/0013). Every A2A answer that shows the stored status carries that time as its
`status.timestamp`: a send's task, GetTask's, a stream's frames, a subscription's first
frame, ListTasks and cancel alike, so a client never sees one status with two times.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import msgspec

from a2a_continue.a2a.answers import TASK
from a2a_continue.core.agents.exchange import Forwarded
from a2a_continue.core.tasks.models import TaskOut
from a2a_continue.facade import translate

JSON = dict[str, object]


class KeptTask(TaskOut, kw_only=True):
    """A task kept for a retried cancel: the REST task and the time of its status."""

    status_at: dt.datetime | None = None


def stored_task(task: TaskOut, version: str, status_at: dt.datetime | None = None) -> object:
    """Show a task of the gateway as an A2A task of ``version``, its status at ``status_at``
    (the stored time of its status; a task kept without one: its last update)."""
    at = status_at or task.updated_at
    status: JSON = {"state": task.state, "timestamp": translate.timestamp(at)}
    if task.status_message is not None:
        status["message"] = task.status_message
    out: JSON = {"id": task.id, "status": status, "artifacts": task.artifacts}
    if task.context_id is not None:
        out["contextId"] = task.context_id
    return translate.task(out, version)


def kept_task(task: TaskOut, status_at: dt.datetime | None) -> bytes:
    """The bytes a cancel keeps for its retries: the task and the time of its status."""
    fields = msgspec.structs.asdict(task)
    return msgspec.json.encode(KeptTask(**fields, status_at=status_at))


def replayed_task(raw: bytes, version: str) -> object:
    """A kept cancel's task, shown again for the retrying client."""
    kept = msgspec.json.decode(raw, type=KeptTask)
    return stored_task(kept, version, kept.status_at)


def with_stored_time(sent: Forwarded) -> Forwarded:
    """A send's answer whose task shows the stored status with the stored time: its bytes too,
    which a retry of the send is answered from."""
    answer = sent.answer
    if answer.kind != TASK:
        return sent
    task = translate.stamped(TASK, answer.raw, sent.state, sent.status_at)
    if task is answer.raw:
        return sent
    reply = msgspec.json.decode(sent.raw)
    result = reply.get("result")
    # 1.0 wraps the task in `task`; 0.3 (and agents that drift) send it bare.
    bare = not isinstance(result, dict) or "status" in result or "task" not in result
    reply["result"] = task if bare else {**result, "task": task}
    return dataclasses.replace(
        sent, raw=msgspec.json.encode(reply), answer=dataclasses.replace(answer, raw=task)
    )
