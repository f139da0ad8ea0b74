"""A client of the gateway as one caller, its answers, and the tokens tests mint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
from multidict import CIMultiDict

from a2a_continue.core.access.callers import mint_token

JSON = dict[str, Any]
JWT_SECRET = "test-secret-" + "x" * 32

# The members of a task as the gateway returns it (SPEC §6).
TASK_FIELDS = {
    "agentId",
    "id",
    "contextId",
    "state",
    "statusMessage",
    "artifacts",
    "owner",
    "teamId",
    "createdAt",
    "updatedAt",
    "completedAt",
    "lastSeq",
}


def token(
    sub: str = "alice@example.com",
    perms: list[str] | None = None,
    teams: list[str] | None = None,
    admin: bool = False,
) -> str:
    """Mint a test token."""
    return mint_token(JWT_SECRET, sub, perms or ["*"], teams or [], admin)


@dataclass
class Response:
    status: int
    headers: CIMultiDict[str]
    raw: bytes

    def json(self) -> Any:
        return msgspec.json.decode(self.raw)


@dataclass
class Client:
    """Calls the gateway over HTTP as one caller (a default token, overridable per call)."""

    base: str
    session: aiohttp.ClientSession
    bearer: str | None = field(default_factory=token)

    async def call(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        data: Any = None,
        bearer: str | None = "",
        headers: dict[str, str] | None = None,
    ) -> Response:
        hdrs = dict(headers or {})
        use = self.bearer if bearer == "" else bearer
        if use is not None:
            hdrs["Authorization"] = f"Bearer {use}"
        if json is not None:
            data = msgspec.json.encode(json)
            hdrs.setdefault("Content-Type", "application/json")
        async with self.session.request(method, self.base + path, data=data, headers=hdrs) as r:
            return Response(r.status, CIMultiDict(r.headers), await r.read())

    def as_(self, bearer: str) -> Client:
        return Client(self.base, self.session, bearer)


async def register(client: Client, url: str, version: str = "1.0", **extra: Any) -> str:
    """Register an agent through the gateway; return its id."""
    body = {"name": "weather", "endpointUrl": url, "protocolVersion": version, **extra}
    r = await client.call("POST", "/v1/a2a/agents", body)
    assert r.status == 201, r.raw
    return str(r.json()["id"])


def assert_problem(r: Any, status: int) -> JSON:
    """Check ``r`` is a problem+json answer of ``status``; return its body."""
    assert r.status == status, r.raw
    assert r.headers["Content-Type"].startswith("application/problem+json")
    problem: JSON = r.json()
    assert problem["status"] == status
    return problem
