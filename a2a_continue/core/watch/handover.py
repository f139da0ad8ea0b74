"""Hand a task the agent just answered for to the watcher, when the answer leaves it live."""

from __future__ import annotations

import logging
import uuid

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import Update
from a2a_continue.core.shapes.messages import ContinueBody
from a2a_continue.core.tasks import watches
from a2a_continue.core.watch.snapshots import status_mark
from a2a_continue.runtime.gateway import Gateway

log = logging.getLogger(__name__)

LIVE_STATES = frozenset({"submitted", "working"})


def returns_immediately(body: ContinueBody) -> bool:
    """Tell whether the caller asked the agent not to wait for the task to settle."""
    return body.configuration is not None and body.configuration.return_immediately is True


async def after_send(
    gw: Gateway,
    agent_id: uuid.UUID,
    answer: Update,
    return_immediately: bool,
) -> None:
    """Hand the task the agent just answered with to the watcher when it is left live.

    After a send with ``returnImmediately`` the task is watched whatever state the answer
    showed, until the agent reports a new status. This process follows it at once when it has
    room; otherwise any process picks it up.
    """
    task = answer.answered
    if task is None or protocol.is_terminal_task_state(task.state):
        return
    if not return_immediately and task.state not in LIVE_STATES:
        return
    watcher = gw.watcher
    # The status the send was answered with, as the watch compares it.
    past = status_mark(answer) if return_immediately else None
    token = uuid.uuid4() if watcher is not None and watcher.room() > 0 else None
    try:
        async with gw.connection() as conn:
            row = await watches.hand_over_watch(
                conn, agent_id, task.id, past, token, gw.settings.watch_lease_s
            )
    except Exception:
        log.exception("task %s could not be handed to the watcher", task.id)
        return
    taken = token is not None and row is not None and row["watch_token"] == token
    if watcher is not None and row is not None and taken:
        watcher.follow(row)
