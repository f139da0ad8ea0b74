"""Following a task whose agent pushes (SPEC §19): no polls, one check per period.

The watcher hands a watched task of an agent that pushes here first. The agent gets a config
of the gateway's own (``core/watch/push_in``); while its pushes arrive (recorded by the push-in
route) the task is checked once every ``A2AC_PUSH_IN_CHECK_S`` with one GetTask, to catch a lost
push. Polling takes over when the agent refuses the config, when a check finds a change no push
brought since the previous check (the agent stopped pushing), or when a push failed
verification.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.core.watch import push_in
from a2a_continue.errors import DatabaseUnavailable
from a2a_continue.runtime.gateway import DB_DOWN, Gateway

log = logging.getLogger(__name__)

# One check: None when the task settled, else whether it recorded a change.
Check = Callable[[], Awaitable[bool | None]]


async def follow_pushes(
    gw: Gateway, target: AgentTarget, row_id: uuid.UUID, task_id: str, check: Check
) -> bool:
    """Let the agent push the task's changes; True when the task settled, False when polling
    has to take over."""
    assert target.agent_id is not None
    try:
        given = await push_in.give_config(gw, target, target.agent_id, row_id, task_id)
    except (DatabaseUnavailable, *DB_DOWN) as exc:
        log.warning("watch of task %s: no push config (%s); polling", task_id, type(exc).__name__)
        return False
    if given is None:
        return False
    seen = given.pushes
    while True:
        await asyncio.sleep(gw.settings.push_in_check_s)
        try:
            async with gw.connection() as conn:
                pushes, usable = await push_in.pushes_of(conn, given.id)
        except (DatabaseUnavailable, *DB_DOWN) as exc:
            log.warning("watch of task %s: not read (%s)", task_id, type(exc).__name__)
            continue
        if not usable:
            log.info("watch of task %s: its pushes failed verification; polling", task_id)
            return False
        recorded = await check()
        if recorded is None:
            return True
        if recorded and pushes == seen:
            log.info("watch of task %s: the agent stopped pushing; polling", task_id)
            return False
        seen = pushes
