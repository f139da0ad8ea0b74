"""Push in (SPEC §19): the push configs the gateway gives agents, and the pushes they send it.

When the gateway starts following a task of an agent that pushes, it gives the agent a config
of its own (inline on a ``returnImmediately`` start, else through the agent's create-config
method): URL ``{A2AC_PUBLIC_URL}/v1/a2a/push-in/{id}`` and a random token, kept hashed. What a
push says is read by the one reader of answers and recorded by the writers the watcher's polls
use (``record_update``, ``data.source`` ``push``), so live streams and pushes out follow.
The watcher checks a pushed task once every ``A2AC_PUSH_IN_CHECK_S`` and polls again when the
agent refuses the config, stops pushing or its pushes fail verification (``usable``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import uuid
from dataclasses import dataclass

import msgspec

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import MESSAGE, read_result
from a2a_continue.a2a.downstream import AgentTarget
from a2a_continue.core.agents.exchange import call_agent
from a2a_continue.core.tasks.store import SYSTEM_ACTOR, TERMINAL_SQL
from a2a_continue.core.tasks.updates import record_update
from a2a_continue.errors import (
    AgentBadAnswer,
    AgentTimeout,
    AgentUnreachable,
    Invalid,
    NotFound,
    Unauthorized,
)
from a2a_continue.runtime.call_limits import AgentBusy
from a2a_continue.runtime.db import Conn
from a2a_continue.runtime.gateway import Gateway
from a2a_continue.settings import Settings, public_base_url

log = logging.getLogger(__name__)

PATH = "/v1/a2a/push-in/"
RECORDED, UNCHANGED = "recorded", "unchanged"

INSERT_CONFIG = """INSERT INTO a2a_push_in (id, agent_id, version, token_sha256, task_id, task)
VALUES ($1, $2, $3, $4, $5, $6)"""

# The newest config of a task: reused while the agent has it (a pick-up after a restart, a
# watch after a follow-up); a refused or failing one says "poll".
TASK_CONFIG = """SELECT id, pushes, refused_at, failed_at, ended_at FROM a2a_push_in
WHERE agent_id = $1 AND task_id = $2 ORDER BY created_at DESC LIMIT 1"""

ACCEPTED = "UPDATE a2a_push_in SET accepted_at = COALESCE(accepted_at, now()) WHERE id = $1"
REFUSED = "UPDATE a2a_push_in SET refused_at = now() WHERE id = $1"
FORGET = "DELETE FROM a2a_push_in WHERE id = $1"
FAILED = "UPDATE a2a_push_in SET failed_at = COALESCE(failed_at, now()) WHERE id = $1"

# Bind a config given inline to the task the send's answer names, unless a push bound it first.
BIND_ANSWER = """UPDATE a2a_push_in SET task_id = COALESCE(task_id, $2),
    task = CASE WHEN COALESCE(task_id, $2) = $2 THEN $3 ELSE task END,
    accepted_at = COALESCE(accepted_at, now())
WHERE id = $1"""

# Bind an unbound config to the task its first push names (the row may not be stored yet:
# agents push before they answer); a concurrent push may have bound it first.
BIND_PUSH = """UPDATE a2a_push_in c SET task_id = $2,
    task = (SELECT t.id FROM a2a_tasks t WHERE t.agent_id = c.agent_id AND t.task_id = $2)
WHERE c.id = $1 AND c.task_id IS NULL RETURNING c.task_id"""

# A push's config and its task as stored (by the agent's task id: the row may be newer).
FIND_PUSHED = """
SELECT c.id, c.agent_id, c.version, c.token_sha256, c.task_id, c.ended_at,
    t.id AS row_id, t.state, t.watch_failed_at
FROM a2a_push_in c LEFT JOIN a2a_tasks t ON t.agent_id = c.agent_id AND t.task_id = c.task_id
WHERE c.id = $1"""

BOUND_ROW = """SELECT t.id FROM a2a_tasks t JOIN a2a_push_in c ON c.agent_id = t.agent_id
WHERE c.id = $1 AND t.task_id = $2"""

COUNT_PUSH = """UPDATE a2a_push_in SET pushes = pushes + 1, last_push_at = now(),
    accepted_at = COALESCE(accepted_at, now()), task = COALESCE(task, $2) WHERE id = $1"""

PUSHES_OF = """SELECT pushes, (refused_at IS NULL AND failed_at IS NULL AND ended_at IS NULL)
    AS usable FROM a2a_push_in WHERE id = $1"""

# End the configs of a task that ended; return them, to be deleted at the agent.
END_CONFIGS = f"""
UPDATE a2a_push_in c SET ended_at = now() FROM a2a_tasks t
WHERE t.id = $1 AND c.agent_id = t.agent_id AND c.task_id = t.task_id AND c.ended_at IS NULL
  AND c.refused_at IS NULL AND t.state IN {TERMINAL_SQL}
RETURNING c.id, c.version, c.task_id"""


@dataclass(frozen=True, slots=True)
class Given:
    """A config the agent has for a task, and how many pushes it had sent when looked up."""

    id: uuid.UUID
    pushes: int


def digest(token: str) -> bytes:
    """What is stored of a token: its SHA-256."""
    return hashlib.sha256(token.encode()).digest()


def new_push(settings: Settings) -> protocol.PushTarget:
    """A new config of the gateway's own: a fresh id, its URL and a random token."""
    config_id = str(uuid.uuid4())
    url = f"{public_base_url(settings)}{PATH}{config_id}"
    return protocol.PushTarget(config_id, url, secrets.token_urlsafe(32))


async def _insert(
    conn: Conn, push: protocol.PushTarget, agent_id: uuid.UUID, version: str,
    task_id: str | None, row_id: uuid.UUID | None,
) -> None:  # fmt: skip
    config, hashed = uuid.UUID(push.id), digest(push.token)
    await conn.execute(INSERT_CONFIG, config, agent_id, version, hashed, task_id, row_id)


# ---- giving the agent a config ----------------------------------------------------------------


async def offer_inline(gw: Gateway, agent_id: uuid.UUID, version: str) -> protocol.PushTarget:
    """A config to give inline on a send; bound to its task by ``bind_answer`` or a push."""
    push = new_push(gw.settings)
    async with gw.connection() as conn:
        await _insert(conn, push, agent_id, version, None, None)
    return push


async def bind_answer(
    gw: Gateway, push: protocol.PushTarget, row_id: uuid.UUID, task_id: str
) -> None:
    """Bind an inline config to the task the send was answered with (best effort)."""
    try:
        async with gw.connection() as conn:
            await conn.execute(BIND_ANSWER, uuid.UUID(push.id), task_id, row_id)
    except Exception as exc:
        log.warning("push config of task %s not bound (%s)", task_id, type(exc).__name__)


async def give_config(
    gw: Gateway, target: AgentTarget, agent_id: uuid.UUID, row_id: uuid.UUID, task_id: str
) -> Given | None:
    """The config the agent pushes the task's changes with: the task's own when it has one,
    else a new one given through the agent's create-config method. None: poll (the agent
    refused it, cannot be reached, or its pushes failed)."""
    async with gw.connection() as conn:
        found = await conn.fetchrow(TASK_CONFIG, agent_id, task_id)
    if found is not None:
        if found["refused_at"] or found["failed_at"] or found["ended_at"]:
            return None
        return Given(found["id"], int(found["pushes"]))
    push = new_push(gw.settings)
    config = uuid.UUID(push.id)
    async with gw.connection() as conn:
        await _insert(conn, push, agent_id, target.protocol_version, task_id, row_id)
    payload = protocol.build_set_push_request(
        target.protocol_version, protocol.new_rpc_id(), task_id, push
    )
    try:
        answer = await call_agent(gw, target, payload)
    except (AgentTimeout, AgentUnreachable, AgentBadAnswer, AgentBusy) as error:
        log.info("task %s: no push config given (%s); polling", task_id, error.detail)
        async with gw.connection() as conn:
            await conn.execute(FORGET, config)
        return None
    refused = "error" in answer
    if refused:
        log.info("task %s: the agent refused the push config (%s); polling", task_id, answer)
    async with gw.connection() as conn:
        await conn.execute(REFUSED if refused else ACCEPTED, config)
    return None if refused else Given(config, 0)


async def offer(
    gw: Gateway, target: AgentTarget, agent_id: uuid.UUID, row_id: uuid.UUID, task_id: str
) -> None:
    """Give the agent a config for a live task unless it has one (best effort: a refresh)."""
    try:
        await give_config(gw, target, agent_id, row_id, task_id)
    except Exception as exc:
        log.info("task %s: no push config given (%s)", task_id, type(exc).__name__)


async def pushes_of(conn: Conn, config: uuid.UUID) -> tuple[int, bool]:
    """How many pushes the config has brought, and whether it is still to be relied on."""
    row = await conn.fetchrow(PUSHES_OF, config)
    return (0, False) if row is None else (int(row["pushes"]), bool(row["usable"]))


async def end_configs(gw: Gateway, target: AgentTarget, row_id: uuid.UUID) -> None:
    """Delete the configs of a task that ended at its agent (best effort)."""
    try:
        async with gw.connection() as conn:
            ended = await conn.fetch(END_CONFIGS, row_id)
        for row in ended:
            payload = protocol.build_delete_push_request(
                row["version"], protocol.new_rpc_id(), row["task_id"], str(row["id"])
            )
            await call_agent(gw, target, payload)
    except Exception as exc:
        log.info("push configs of an ended task not deleted at the agent (%s)", exc)


# ---- a push ---------------------------------------------------------------------------------


async def receive_push(gw: Gateway, config: uuid.UUID, token: str | None, body: bytes) -> str:
    """Record what one push says (``recorded`` or ``unchanged``); raise 401, 404 or 422.

    Nothing is written for a refused push but the config's mark: a push that fails
    verification sends its task back to polling.
    """
    async with gw.connection() as conn:
        row = await conn.fetchrow(FIND_PUSHED, config)
    if row is None:
        raise NotFound(f"push config {config} not found")
    if token is None or not hmac.compare_digest(digest(token), row["token_sha256"]):
        await _failed(gw, config)
        raise Unauthorized("the push's token does not match its config")
    if (
        row["ended_at"] is not None
        or row["watch_failed_at"] is not None
        or (row["state"] is not None and protocol.is_terminal_task_state(row["state"]))
    ):
        raise NotFound(f"the task of push config {config} has ended")
    try:
        update = read_result(msgspec.json.decode(body), row["version"], frame=True)
    except (msgspec.DecodeError, ValueError) as exc:
        await _failed(gw, config)
        raise Invalid([{"loc": "$", "msg": f"not a Task or a StreamResponse: {exc}"}]) from None
    task_id, row_id = row["task_id"], row["row_id"]
    if update.task_id is None or (task_id is not None and update.task_id != task_id):
        await _failed(gw, config)
        named = "no task" if update.task_id is None else f"task {update.task_id!r}"
        msg = f"the push names {named}, not the config's task {task_id!r}"
        raise Invalid([{"loc": "$", "msg": msg}])
    async with gw.connection() as conn:
        if task_id is None:
            row_id = await _bind_push(conn, config, update.task_id)
        outcome = UNCHANGED
        if row_id is not None and update.kind != MESSAGE:
            applied = await record_update(conn, row_id, update, source="push", actor=SYSTEM_ACTOR)
            outcome = RECORDED if applied.seq is not None else UNCHANGED
        await conn.execute(COUNT_PUSH, config, row_id)
    return outcome


async def _bind_push(conn: Conn, config: uuid.UUID, task_id: str) -> uuid.UUID | None:
    """Bind a config to the task its first push names; return the task's row (None: not
    stored yet, its send's answer will store it). Refuse a task other than a racing bind's."""
    bound = await conn.fetchval(BIND_PUSH, config, task_id)
    if bound is None:
        row = await conn.fetchrow(FIND_PUSHED, config)
        if row is None or row["task_id"] != task_id:
            raise Invalid([{"loc": "$", "msg": "the push names another task than its config's"}])
        found: uuid.UUID | None = row["row_id"]
        return found
    stored: uuid.UUID | None = await conn.fetchval(BOUND_ROW, config, task_id)
    return stored


async def _failed(gw: Gateway, config: uuid.UUID) -> None:
    """Mark a config whose push failed verification: its task is polled again."""
    try:
        async with gw.connection() as conn:
            await conn.execute(FAILED, config)
    except Exception as exc:
        log.warning("push config %s not marked failed (%s)", config, type(exc).__name__)
