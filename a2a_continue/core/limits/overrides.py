"""``a2a_limit_overrides``: an admin's limits for one caller or team, and their body."""

from __future__ import annotations

import datetime
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

from a2a_continue.core.limits.policy import Kind, Limits, Subject, merged
from a2a_continue.core.shapes.wire import Base, Out
from a2a_continue.runtime.db import Conn

Rate = Annotated[float, Meta(gt=0, le=1_000_000)]
Count = Annotated[int, Meta(ge=1, le=1_000_000)]


class OverrideBody(Base):
    """``PUT /v1/a2a/limits/{kind}/{name}``: null = no limit of that kind; a missing member
    keeps the default."""

    rps: Rate | UnsetType | None = UNSET
    burst: Count | UnsetType | None = UNSET
    inflight: Count | UnsetType | None = UNSET

    def given(self) -> dict[str, float | int | None]:
        """The members the body names."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not UNSET}


class Effective(Out):
    """The limits that apply (defaults with the override in place); null = none."""

    rps: float | None
    burst: int | None
    inflight: int | None


class OverrideOut(Out):
    """A stored override: the members it sets, and the limits that apply with it."""

    kind: str
    name: str
    effective: Effective
    updated_at: datetime.datetime
    rps: float | UnsetType | None = UNSET
    burst: int | UnsetType | None = UNSET
    inflight: int | UnsetType | None = UNSET


def override_out(row: Any, default: Limits) -> OverrideOut:
    """The answer for a stored row."""
    given = dict(msgspec.json.decode(row["limits"]))
    applied = merged(default, given)
    return OverrideOut(
        kind=row["kind"],
        name=row["name"],
        effective=Effective(rps=applied.rps, burst=applied.burst, inflight=applied.inflight),
        updated_at=row["updated_at"],
        **given,
    )


_COLUMNS = "kind, name, limits::text AS limits, updated_at"
_PUT = f"""
INSERT INTO a2a_limit_overrides (kind, name, limits, updated_at)
VALUES ($1, $2, $3::text::jsonb, clock_timestamp())
ON CONFLICT (kind, name) DO UPDATE SET limits = EXCLUDED.limits, updated_at = EXCLUDED.updated_at
RETURNING {_COLUMNS}
"""
_GET = f"SELECT {_COLUMNS} FROM a2a_limit_overrides WHERE kind = $1 AND name = $2"
_DELETE = "DELETE FROM a2a_limit_overrides WHERE kind = $1 AND name = $2"
_ALL = "SELECT kind, name, limits::text AS limits FROM a2a_limit_overrides"


async def put_override(conn: Conn, kind: Kind, name: str, body: OverrideBody) -> Any:
    """Store the override of one subject; return its row."""
    return await conn.fetchrow(_PUT, kind, name, msgspec.json.encode(body.given()).decode())


async def get_override(conn: Conn, kind: Kind, name: str) -> Any:
    """The stored override of one subject, or None."""
    return await conn.fetchrow(_GET, kind, name)


async def delete_override(conn: Conn, kind: Kind, name: str) -> None:
    """Forget the override of one subject (nothing when there is none)."""
    await conn.execute(_DELETE, kind, name)


async def load_overrides(conn: Conn) -> dict[Subject, dict[str, float | int | None]]:
    """Every override: the members each sets."""
    rows = await conn.fetch(_ALL)
    return {(r["kind"], r["name"]): dict(msgspec.json.decode(r["limits"])) for r in rows}
