"""Push-notification configs of a task (SPEC §12): create, read, list, delete, scoped like
their task. The token and the credentials are sealed and never returned."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from a2a_continue.a2a.netguard import normalize_endpoint_url
from a2a_continue.core.access.callers import TASK_VISIBLE, Caller
from a2a_continue.core.shapes.wire import Base, Out
from a2a_continue.errors import Invalid, NotFound
from a2a_continue.limits import header_problem
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.secrets import Sealer
from a2a_continue.settings import Network

MAX_CONFIGS = 10
PUSH_NETWORKS = "A2AC_PUSH_NETWORKS"

CONFIG_ID_MAX = 200  # characters of a config id a client chooses (the table checks it too)


class Authentication(Base):
    """How the gateway authenticates to the webhook: ``Authorization: <scheme> <credentials>``,
    or, with scheme ``Bearer`` and no credentials, a JWT the gateway signs."""

    scheme: Annotated[
        str, Meta(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
    ]
    credentials: Annotated[str, Meta(min_length=1, max_length=4096)] | None = None


class PushConfigCreate(Base):
    """A webhook for a task's changes."""

    url: Annotated[str, Meta(min_length=1, max_length=2048)]
    version: Literal["1.0", "0.3"] = "1.0"
    token: Annotated[str, Meta(min_length=1, max_length=4096)] | None = None
    authentication: Authentication | None = None


class AuthenticationOut(Out):
    scheme: str


class PushConfigOut(Out):
    """A config as callers see it (never its token or credentials)."""

    id: str
    url: str
    version: str
    authentication: AuthenticationOut | None
    has_token: bool
    created_at: dt.datetime


class PushConfigList(Out):
    configs: list[PushConfigOut]


# The visible task ($4 agent, $5 task id); $1-$3 are the caller's scope.
_TASK = f"""task AS (
    SELECT t.id FROM a2a_tasks t JOIN a2a_agents a ON a.id = t.agent_id
    WHERE t.agent_id = $4 AND t.task_id = $5 AND {TASK_VISIBLE}
)"""

CONFIG_COLUMNS = """c.row_id, c.id, c.url, c.version, c.auth_scheme,
    c.token_sealed IS NOT NULL AS has_token, c.created_at"""

FIND_TASK = f"WITH {_TASK} SELECT id FROM task"

# Serialises creates on one task, so that the bound of MAX_CONFIGS holds.
LOCK_CONFIGS = "SELECT pg_advisory_xact_lock(hashtextextended($1::uuid::text, 42))"

SELECT_ROW_ID = "SELECT row_id FROM a2a_push_configs WHERE task = $1 AND id = $2"

COUNT_OTHERS = "SELECT count(*) FROM a2a_push_configs WHERE task = $1 AND id <> $2"

# The task's row, locked while its config is made: no event falls between the config's
# position (after the task's last event) and the config.
LOCK_TASK = "SELECT last_seq FROM a2a_tasks WHERE id = $1 FOR NO KEY UPDATE"

# Create, or replace the config of the same id (re-enabling one a 410 disabled); either way its
# deliveries start after the task's last event ($9), and a delivery in flight under the
# replaced one is not settled.
UPSERT_CONFIG = f"""
INSERT INTO a2a_push_configs AS c (row_id, task, id, url, version, token_sealed, auth_scheme,
    credentials_sealed, pos_seq)
VALUES ($8, $1, $2, $3, $4, $5, $6, $7, $9)
ON CONFLICT (task, id) DO UPDATE SET url = EXCLUDED.url, version = EXCLUDED.version,
    token_sealed = EXCLUDED.token_sealed, auth_scheme = EXCLUDED.auth_scheme,
    credentials_sealed = EXCLUDED.credentials_sealed, enabled = true, started = false,
    pos_seq = EXCLUDED.pos_seq, pos_part = -1, opening = NULL, opening_seq = NULL,
    lease_token = NULL, lease_expires_at = NULL, attempts = 0, parked = false
RETURNING {CONFIG_COLUMNS}
"""

# A config given on a start: its first delivery is the task as it stands (the start's
# first state), kept with the config so that no event falls between them.
OPEN_WITH_TASK = """
UPDATE a2a_push_configs c SET started = true, opening_seq = t.last_seq, pos_seq = t.last_seq,
    opening = jsonb_build_object('state', t.state, 'statusMessage', t.status_message,
        'artifacts', t.artifacts)
FROM a2a_tasks t WHERE c.row_id = $1 AND t.id = $2
"""

SELECT_CONFIG = f"""WITH {_TASK}
SELECT {CONFIG_COLUMNS} FROM a2a_push_configs c JOIN task ON c.task = task.id WHERE c.id = $6"""

LIST_CONFIGS = f"""WITH {_TASK}
SELECT {CONFIG_COLUMNS} FROM a2a_push_configs c JOIN task ON c.task = task.id
ORDER BY c.created_at, c.id"""

DELETE_CONFIG = f"""WITH {_TASK}, gone AS (
    DELETE FROM a2a_push_configs c USING task WHERE c.task = task.id AND c.id = $6
    RETURNING c.task, c.row_id
)
DELETE FROM a2a_push_deliveries d USING gone WHERE d.task = gone.task AND d.config = gone.row_id"""


def config_out(row: Record) -> PushConfigOut:
    """Shape a config row for callers."""
    scheme = row["auth_scheme"]
    return PushConfigOut(
        id=row["id"],
        url=row["url"],
        version=row["version"],
        authentication=AuthenticationOut(scheme=scheme) if scheme else None,
        has_token=row["has_token"],
        created_at=row["created_at"],
    )


def sealed_context(config_row_id: uuid.UUID) -> bytes:
    """What a config's sealed secrets are bound to (a sealed value moved to another row fails)."""
    return b"push:" + config_row_id.bytes


async def task_row_id(conn: Conn, caller: Caller, agent_id: uuid.UUID, task_id: str) -> uuid.UUID:
    """The row id of a visible task, or 404."""
    row_id = await conn.fetchval(FIND_TASK, *caller.scope_args(), agent_id, task_id)
    if row_id is None:
        raise NotFound(f"task {task_id} not found")
    assert isinstance(row_id, uuid.UUID)
    return row_id


def check_secrets(body: PushConfigCreate) -> None:
    """Refuse a token or credentials that no delivery could send as a header value (422):
    the receiver would never get a delivery, and the config's later ones would wait behind it."""
    sent = {"$.token": ("X-A2A-Notification-Token", body.token)}
    if body.authentication is not None:
        sent["$.authentication.credentials"] = ("Authorization", body.authentication.credentials)
    errors = [
        {"loc": loc, "msg": problem}
        for loc, (name, value) in sent.items()
        if value is not None and (problem := header_problem(name, value))
    ]
    if errors:
        raise Invalid(errors)


def checked_url(url: str, networks: Sequence[Network]) -> str:
    """A webhook URL passes the agents' address guard (with ``A2AC_PUSH_NETWORKS``); 422."""
    return normalize_endpoint_url(
        url, networks, loc="$.url", setting=PUSH_NETWORKS, what="webhooks"
    )


async def create_config(
    conn: Conn,
    caller: Caller,
    agent_id: uuid.UUID,
    task_id: str,
    body: PushConfigCreate,
    sealer: Sealer,
    networks: Sequence[Network] = (),
    *,
    config_id: str | None = None,
    deliver_task: bool = False,
) -> PushConfigOut:
    """Create (or replace, same id) a config of a visible task; ``deliver_task``: its first
    delivery is the task as it stands now. 404 for an invisible task, 422 past the bound."""
    url = checked_url(body.url, networks)
    check_secrets(body)
    config_id = config_id or str(uuid.uuid4())
    async with conn.transaction():
        task = await task_row_id(conn, caller, agent_id, task_id)
        await conn.execute(LOCK_CONFIGS, task)
        last_seq = await conn.fetchval(LOCK_TASK, task)
        if await conn.fetchval(COUNT_OTHERS, task, config_id) >= MAX_CONFIGS:
            raise Invalid([{"loc": "$", "msg": f"a task has at most {MAX_CONFIGS} push configs"}])
        # A replaced config keeps its row (and its deliveries); its secrets are sealed to it.
        row_id = await conn.fetchval(SELECT_ROW_ID, task, config_id) or uuid.uuid4()
        row = await conn.fetchrow(
            UPSERT_CONFIG,
            task,
            config_id,
            url,
            body.version,
            _seal(sealer, body.token, row_id),
            body.authentication.scheme if body.authentication else None,
            _seal(sealer, body.authentication.credentials if body.authentication else None, row_id),
            row_id,
            last_seq + 1,
        )
        assert row is not None
        if deliver_task:
            await conn.execute(OPEN_WITH_TASK, row["row_id"], task)
    return config_out(row)


def _seal(sealer: Sealer, value: str | None, row_id: uuid.UUID) -> bytes | None:
    return None if value is None else sealer.seal(value, sealed_context(row_id))


async def get_config(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, task_id: str, config_id: str
) -> PushConfigOut:
    """One config of a visible task, or 404."""
    row = await conn.fetchrow(SELECT_CONFIG, *caller.scope_args(), agent_id, task_id, config_id)
    if row is None:
        await task_row_id(conn, caller, agent_id, task_id)
        raise NotFound(f"push config {config_id} not found")
    return config_out(row)


async def list_configs(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, task_id: str
) -> PushConfigList:
    """The configs of a visible task, oldest first (404 for an invisible task)."""
    await task_row_id(conn, caller, agent_id, task_id)
    rows = await conn.fetch(LIST_CONFIGS, *caller.scope_args(), agent_id, task_id)
    return PushConfigList(configs=[config_out(r) for r in rows])


async def delete_config(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, task_id: str, config_id: str
) -> None:
    """Delete a config with its deliveries; deleting one already gone is fine (404 only for
    an invisible task)."""
    await task_row_id(conn, caller, agent_id, task_id)
    await conn.execute(DELETE_CONFIG, *caller.scope_args(), agent_id, task_id, config_id)


def decode_config(value: Any, loc: str) -> PushConfigCreate:
    """Read a config given as JSON (a façade param) in the gateway's shape; 422 naming ``loc``."""
    try:
        return msgspec.convert(value, PushConfigCreate)
    except msgspec.ValidationError as exc:
        text, _, at = str(exc).partition(" - at `")
        raise Invalid(
            [{"loc": (at.rstrip("`") or "$").replace("$", loc, 1), "msg": text}]
        ) from None
