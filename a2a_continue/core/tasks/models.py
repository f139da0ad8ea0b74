"""The tasks' wire types: a task and its events as shown, and their pages."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from a2a_continue.core.shapes.wire import Out


class TaskOut(Out):
    agent_id: uuid.UUID
    id: str
    context_id: str | None
    state: str
    status_message: dict[str, Any] | None
    artifacts: list[Any]
    owner: str
    team_id: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    completed_at: dt.datetime | None
    last_seq: int


class TaskList(Out):
    tasks: list[TaskOut]
    next_cursor: str | None


class EventOut(Out):
    seq: int
    type: str
    previous_state: str | None
    new_state: str | None
    actor: str
    data: dict[str, Any]
    created_at: dt.datetime


class EventList(Out):
    events: list[EventOut]
    next_after: int
