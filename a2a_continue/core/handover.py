"""Hand a task the agent just answered for to the watcher, when the answer leaves it live."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.core import tasks
from a2a_continue.core.models import ContinueBody
from a2a_continue.core.snapshots import status_mark
from a2a_continue.core.updates import TASK, Update, parse_frame
from a2a_continue.runtime.gateway import Gateway

log = logging.getLogger(__name__)

LIVE_STATES = frozenset({"submitted", "working"})


def answer_mark(task: protocol.AgentTask, body: Any) -> dict[str, Any]:
    """The status a send was answered with, as the watch compares it."""
    try:
        update = parse_frame(body)
    except protocol.ProtocolError:
        update = None
    if update is None or update.kind != TASK:
        update = Update(TASK, task.id, state=task.state, status_message=task.status_message)
    return status_mark(update)


def returns_immediately(body: ContinueBody) -> bool:
    """Tell whether the caller asked the agent not to wait for the task to settle."""
    return body.configuration is not None and body.configuration.return_immediately is True


async def after_send(
    gw: Gateway,
    agent_id: uuid.UUID,
    task: protocol.AgentTask,
    body: Any,
    return_immediately: bool,
) -> None:
    """Hand a task the agent just answered for to the watcher when it is left live.

    After a send with ``returnImmediately`` the task is watched whatever state the answer
    showed, until the agent reports a new status. This process follows it at once when it has
    room; otherwise any process picks it up.
    """
    if protocol.is_terminal_task_state(task.state):
        return
    if not return_immediately and task.state not in LIVE_STATES:
        return
    watcher = gw.watcher
    past = answer_mark(task, body) if return_immediately else None
    token = uuid.uuid4() if watcher is not None and watcher.room() > 0 else None
    try:
        async with gw.connection() as conn:
            row = await tasks.hand_over_watch(
                conn, agent_id, task.id, past, token, gw.settings.watch_lease_s
            )
    except Exception:
        log.exception("task %s could not be handed to the watcher", task.id)
        return
    taken = token is not None and row is not None and row["watch_token"] == token
    if watcher is not None and row is not None and taken:
        watcher.follow(row)
