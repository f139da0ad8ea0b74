"""The team a request acts for: a task's team (read once per process; it never changes)."""

from __future__ import annotations

from typing import Any

from a2a_continue.runtime.db import Conn

_TEAM = "SELECT team_id FROM a2a_tasks WHERE agent_id = $1 AND task_id = $2"
# The most task teams one process remembers.
TEAMS_KEPT = 50_000


async def task_team(conn: Conn, agent_id: Any, task_id: str) -> tuple[bool, str | None]:
    """(whether the task exists, its team or None)."""
    row = await conn.fetchrow(_TEAM, agent_id, task_id)
    return (False, None) if row is None else (True, row["team_id"])


class TeamCache:
    """The teams of the tasks this process has seen."""

    def __init__(self) -> None:
        self.known: dict[tuple[Any, str], str | None] = {}

    def get(self, agent_id: Any, task_id: str) -> tuple[bool, str | None]:
        """(known, team)."""
        key = (agent_id, task_id)
        if key in self.known:
            return True, self.known[key]
        return False, None

    def keep(self, agent_id: Any, task_id: str, team: str | None) -> None:
        """Remember a task's team."""
        if len(self.known) >= TEAMS_KEPT:
            self.known.clear()
        self.known[(agent_id, task_id)] = team
