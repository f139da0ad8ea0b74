"""Watch leases: which process follows a live task, taken and renewed in PostgreSQL.

A task is *live* while its stored state is ``submitted`` or ``working``, or while a send with
``returnImmediately`` waits for the agent to report a new status (``watch_past``). One process
at a time holds a task's lease (token + expiry); a lease that is not renewed expires, and any
process may then take it over. A follow-up claim and a watch lease never hold one task at once:
each statement that takes one refuses a task the other holds. A watch ends once the stored
task no longer needs it (``settled``), whoever wrote that state. The statements that take,
renew and give back leases are the task store's (``tasks``: pick_up_watches, …).
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import TASK, Update
from a2a_continue.core.tasks.watches import renew_watches
from a2a_continue.core.watch.snapshots import status_mark
from a2a_continue.runtime.db import Conn

STORED_STATUS = "SELECT state, status_message FROM a2a_tasks WHERE id = $1"


def settled(state: str, status_message: Any, past: dict[str, Any] | None) -> bool:
    """Tell whether a task stored so needs no more watching.

    A terminal task never does; an interrupted one does not unless it still shows the status
    a ``returnImmediately`` send was answered with (``past``, compared by state and message).
    """
    if protocol.is_terminal_task_state(state):
        return True
    if not protocol.is_interrupted_task_state(state):
        return False
    if past is None:
        return True
    mark = status_mark(Update(TASK, state=state, status_message=status_message))
    return (mark["state"], mark["message"]) != (past.get("state"), past.get("message"))


async def renew(
    conn: Conn, held: dict[uuid.UUID, uuid.UUID], lease_s: float
) -> dict[uuid.UUID, bool]:
    """Extend the leases held (task row id → token); return the tasks still held, each with
    whether it is ``settled`` as stored."""
    rows = await renew_watches(conn, held, lease_s)
    return {
        row["id"]: settled(row["state"], row["status_message"], row["watch_past"]) for row in rows
    }


async def stored_settled(conn: Conn, row_id: uuid.UUID, past: dict[str, Any] | None) -> bool | None:
    """Tell whether the stored task is ``settled``; None when it no longer exists."""
    row = await conn.fetchrow(STORED_STATUS, row_id)
    return None if row is None else settled(row["state"], row["status_message"], past)
