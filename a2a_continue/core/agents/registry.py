"""The agent registry: its SQL and its rules (visibility, ownership, sealed credentials)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from a2a_continue.a2a.netguard import normalize_endpoint_url
from a2a_continue.core.access.callers import AGENT_VISIBLE, Caller
from a2a_continue.core.agents.card_trust import FetchedCard
from a2a_continue.core.agents.models import AgentAuth, AgentCreate, AgentList, AgentOut, AgentPatch
from a2a_continue.core.shapes.pagination import cursor_param, encode_cursor, limit_param
from a2a_continue.core.tasks.interest import notify_agent_sql
from a2a_continue.errors import Forbidden, Invalid, NotFound
from a2a_continue.limits import check_agent_auth
from a2a_continue.runtime.db import Conn, Record
from a2a_continue.runtime.secrets import Sealer
from a2a_continue.settings import Network

JSON = dict[str, Any]

AGENT_COLUMNS = """a.id, a.name, a.endpoint_url, a.protocol_version, a.visibility, a.team_id,
    a.owner, a.auth_type, a.timeout_seconds, a.created_at, a.updated_at, a.capabilities, a.card,
    a.card_url, a.card_keys, a.require_signed_card, a.card_signature"""


def agent_out(row: Record) -> AgentOut:
    """Shape an agent row for callers (credentials never included)."""
    return AgentOut(
        id=row["id"],
        name=row["name"],
        endpoint_url=row["endpoint_url"],
        protocol_version=row["protocol_version"],
        visibility=row["visibility"],
        team_id=row["team_id"],
        owner=row["owner"],
        auth_type=row["auth_type"],
        timeout_seconds=row["timeout_seconds"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        capabilities=row["capabilities"],
        card=row["card"],
        card_url=row["card_url"],
        card_keys=row["card_keys"],
        require_signed_card=row["require_signed_card"],
        card_signature=row["card_signature"],
    )


def check_team(caller: Caller, visibility: str, team_id: str | None) -> None:
    """A team agent needs a team, and only its members (or an admin) may name it."""
    if visibility == "team" and team_id is None:
        raise Invalid([{"loc": "$.teamId", "msg": "a team agent needs a teamId"}])
    if team_id is not None and not caller.is_admin and team_id not in caller.teams:
        raise Forbidden(f"you are not a member of team {team_id!r}")


def auth_type(auth: AgentAuth | None) -> str:
    """Name the kind of credentials (the tag of the auth variant)."""
    return "none" if auth is None else str(type(auth).__struct_config__.tag)


def seal_auth(sealer: Sealer, auth: AgentAuth | None, agent_id: uuid.UUID) -> bytes | None:
    """Encrypt credentials, bound to the agent they belong to."""
    if auth is None:
        return None
    return sealer.seal(msgspec.to_builtins(auth), agent_id.bytes)


def can_stream(row: Record) -> bool:
    """Tell whether the agent of a row (with its ``capabilities``) answers with a stream."""
    capabilities = row["capabilities"]
    return isinstance(capabilities, dict) and capabilities.get("streaming") is True


def can_push(row: Record) -> bool:
    """Tell whether the agent of a row (with its ``capabilities``) sends push notifications."""
    capabilities = row["capabilities"]
    return isinstance(capabilities, dict) and capabilities.get("pushNotifications") is True


async def create_agent(
    conn: Conn,
    caller: Caller,
    body: AgentCreate,
    sealer: Sealer,
    networks: Sequence[Network] = (),
    card: FetchedCard | None = None,
) -> AgentOut:
    """Register an agent owned by the caller (``body`` complete; ``card`` when it had one)."""
    assert body.name is not None and body.endpoint_url is not None
    endpoint_url = normalize_endpoint_url(body.endpoint_url, networks)
    check_agent_auth(body.auth)
    check_team(caller, body.visibility, body.team_id)
    agent_id = uuid.uuid4()
    row = await conn.fetchrow(
        f"""
        INSERT INTO a2a_agents AS a (id, name, endpoint_url, protocol_version, visibility,
            team_id, owner, auth_type, auth_sealed, timeout_seconds, capabilities, card,
            card_url, card_signature, card_keys, require_signed_card)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
        RETURNING {AGENT_COLUMNS}
        """,
        agent_id,
        body.name,
        endpoint_url,
        body.protocol_version,
        body.visibility,
        body.team_id,
        caller.sub,
        auth_type(body.auth),
        seal_auth(sealer, body.auth, agent_id),
        body.timeout_seconds,
        msgspec.to_builtins(body.capabilities),
        None if card is None else card.card,
        None if card is None else card.url,
        None if card is None else card.signature,
        msgspec.to_builtins(body.card_keys),
        body.require_signed_card,
    )
    assert row is not None
    return agent_out(row)


async def list_agents(conn: Conn, caller: Caller, params: Mapping[str, str]) -> AgentList:
    """List the agents the caller can see, newest first, one page."""
    limit = limit_param(params)
    after_at, after_id = cursor_param(params)
    rows = await conn.fetch(
        f"""
        SELECT {AGENT_COLUMNS} FROM a2a_agents a
        WHERE {AGENT_VISIBLE}
          AND ($4::timestamptz IS NULL OR (a.created_at, a.id) < ($4, $5::uuid))
        ORDER BY a.created_at DESC, a.id DESC
        LIMIT $6
        """,
        *caller.scope_args(),
        after_at,
        after_id,
        limit + 1,
    )
    page = rows[:limit]
    more = len(rows) > limit
    cursor = encode_cursor(page[-1]["created_at"], page[-1]["id"]) if more else None
    return AgentList(agents=[agent_out(r) for r in page], next_cursor=cursor)


SELECT_VISIBLE_AGENT = f"""
SELECT {AGENT_COLUMNS}, a.id AS agent_id, a.auth_sealed
FROM a2a_agents a WHERE a.id = $4 AND {AGENT_VISIBLE}
"""


async def visible_agent_row(
    conn: Conn, caller: Caller, agent_id: uuid.UUID, *, for_update: bool = False
) -> Record:
    """Return the row of an agent the caller can see (credentials sealed), or raise 404."""
    sql = SELECT_VISIBLE_AGENT + (" FOR UPDATE" if for_update else "")
    row = await conn.fetchrow(sql, *caller.scope_args(), agent_id)
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    return row


async def get_agent(conn: Conn, caller: Caller, agent_id: uuid.UUID) -> AgentOut:
    """Return one visible agent, or 404."""
    return agent_out(await visible_agent_row(conn, caller, agent_id))


async def _owned_agent_row(conn: Conn, caller: Caller, agent_id: uuid.UUID) -> Record:
    row = await visible_agent_row(conn, caller, agent_id, for_update=True)
    if row["owner"] != caller.sub and not caller.is_admin:
        raise Forbidden("only the agent's owner or an admin may change it")
    return row


async def update_agent(
    conn: Conn,
    caller: Caller,
    agent_id: uuid.UUID,
    patch: AgentPatch,
    sealer: Sealer,
    networks: Sequence[Network] = (),
    card: FetchedCard | None = None,
) -> AgentOut:
    """Apply a partial update by the owner or an admin (``card``: the refetched card)."""
    async with conn.transaction():
        row = await _owned_agent_row(conn, caller, agent_id)
        values = {f: getattr(patch, f) for f in patch.__struct_fields__}
        values.pop("card_url")
        merged = {k: (row[k] if v is UNSET else v) for k, v in values.items() if k != "auth"}
        merged["capabilities"] = msgspec.to_builtins(merged["capabilities"])
        merged["card_keys"] = msgspec.to_builtins(merged["card_keys"])
        if patch.endpoint_url is not UNSET:
            merged["endpoint_url"] = normalize_endpoint_url(patch.endpoint_url, networks)
        if isinstance(patch.auth, AgentAuth):
            check_agent_auth(patch.auth)
        if patch.team_id is not UNSET or patch.visibility is not UNSET:
            check_team(caller, merged["visibility"], merged["team_id"])
        auth_changed = patch.auth is not UNSET
        new_auth = patch.auth if isinstance(patch.auth, AgentAuth) else None
        updated = await conn.fetchrow(
            f"""
            UPDATE a2a_agents AS a SET name = $2, endpoint_url = $3, protocol_version = $4,
                visibility = $5, team_id = $6, timeout_seconds = $7,
                auth_type = CASE WHEN $8 THEN $9 ELSE a.auth_type END,
                auth_sealed = CASE WHEN $8 THEN $10 ELSE a.auth_sealed END,
                card = CASE WHEN $12 THEN $13 ELSE a.card END,
                card_url = CASE WHEN $12 THEN $14 ELSE a.card_url END,
                card_signature = CASE WHEN $12 THEN $15 ELSE a.card_signature END,
                card_keys = $16, require_signed_card = $17,
                capabilities = $11, updated_at = now()
            WHERE a.id = $1
            RETURNING {AGENT_COLUMNS}, {notify_agent_sql("a.id")} AS notified
            """,
            agent_id,
            merged["name"],
            merged["endpoint_url"],
            merged["protocol_version"],
            merged["visibility"],
            merged["team_id"],
            merged["timeout_seconds"],
            auth_changed,
            auth_type(new_auth),
            seal_auth(sealer, new_auth, agent_id),
            merged["capabilities"],
            # A card describes one endpoint: a new one by hand leaves no card.
            card is not None or merged["endpoint_url"] != row["endpoint_url"],
            None if card is None else card.card,
            None if card is None else card.url,
            None if card is None else card.signature,
            merged["card_keys"],
            merged["require_signed_card"],
        )
    assert updated is not None
    return agent_out(updated)


async def delete_agent(conn: Conn, caller: Caller, agent_id: uuid.UUID) -> None:
    """Delete an agent (and, by cascade, its tasks) by the owner or an admin."""
    async with conn.transaction():
        await _owned_agent_row(conn, caller, agent_id)
        # Its streams close: the notification wakes them to find their task gone.
        await conn.execute(
            f"DELETE FROM a2a_agents a WHERE a.id = $1 RETURNING {notify_agent_sql('a.id')}",
            agent_id,
        )
