"""Callers: each reason for a 401, the permission table and its 403s."""

from __future__ import annotations

import asyncio
import time
import uuid
import warnings
from typing import Any

import aiohttp
import jwt
import msgspec
import pytest
from jwt.warnings import InsecureKeyLengthWarning
from multidict import CIMultiDict
from starlette.requests import Request
from starlette.responses import Response as StarletteResponse
from starlette.routing import Route

from a2a_continue.app import ROUTES, create_app
from a2a_continue.core.access.callers import mint_token
from a2a_continue.http.routes import PUBLIC
from a2a_continue.settings import Settings
from tests.support.client import JWT_SECRET, Client, Response, token
from tests.support.servers import serve_asgi

PERMISSION_KINDS = ["a2a.read", "a2a.create", "a2a.update", "a2a.delete", "a2a.invoke"]


def claims(**changes: Any) -> dict[str, Any]:
    """Valid claims for alice with every permission, with ``changes`` applied (None drops)."""
    base: dict[str, Any] = {
        "sub": "alice@example.com",
        "permissions": ["*"],
        "teams": [],
        "is_admin": False,
        "exp": int(time.time()) + 600,
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def signed(payload: dict[str, Any], secret: str = JWT_SECRET, algorithm: str = "HS256") -> str:
    return str(jwt.encode(payload, secret, algorithm=algorithm))


def assert_401(r: Response) -> None:
    assert r.status == 401, r.raw
    assert r.headers["Content-Type"] == "application/problem+json"
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    body = r.json()
    assert body["status"] == 401
    assert body["type"].endswith(":unauthorized")
    assert body["detail"]


# ---- 401: every way a token can be missing or wrong ---------------------------------------


async def test_request_without_authorization_header_is_401(client: Client) -> None:
    assert_401(await client.call("GET", "/v1/a2a/agents", bearer=None))


@pytest.mark.parametrize("header", ["Basic YWxpY2U6cHc=", "Token abc", "Bearer", "Bearer   "])
async def test_authorization_header_that_is_not_bearer_is_401(client: Client, header: str) -> None:
    r = await client.call("GET", "/v1/a2a/agents", bearer=None, headers={"Authorization": header})
    assert_401(r)


@pytest.mark.parametrize("bad", ["not-a-jwt", "a.b.c", "e30.e30"])
async def test_malformed_token_is_401(client: Client, bad: str) -> None:
    assert_401(await client.call("GET", "/v1/a2a/agents", bearer=bad))


@pytest.mark.parametrize("bad", ["not-a-jwt", "a.b.c", "e30.e30", "eyJhbGciOiJIUzI1NiJ9.x.y"])
async def test_a_token_that_is_not_a_jwt_is_401_saying_so(client: Client, bad: str) -> None:
    r = await client.call("GET", "/v1/a2a/agents", bearer=bad)
    assert_401(r)
    assert r.json()["detail"].startswith("the bearer token is not a JWT")


async def test_token_signed_with_another_secret_is_401(client: Client) -> None:
    r = await client.call("GET", "/v1/a2a/agents", bearer=signed(claims(), secret="y" * 40))
    assert_401(r)
    assert "signature" in r.json()["detail"]


async def test_token_signed_with_another_algorithm_is_401(client: Client) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureKeyLengthWarning)  # the test secret is short
        other = signed(claims(), algorithm="HS512")
    r = await client.call("GET", "/v1/a2a/agents", bearer=other)
    assert_401(r)


async def test_unsigned_token_is_401(client: Client) -> None:
    unsigned = jwt.encode(claims(), "", algorithm="none")
    assert_401(await client.call("GET", "/v1/a2a/agents", bearer=unsigned))


async def test_expired_token_is_401(client: Client) -> None:
    r = await client.call("GET", "/v1/a2a/agents", bearer=signed(claims(exp=int(time.time()) - 5)))
    assert_401(r)
    assert "expired" in r.json()["detail"]


@pytest.mark.parametrize("claim", ["sub", "exp"])
async def test_token_without_a_required_claim_is_401(client: Client, claim: str) -> None:
    r = await client.call("GET", "/v1/a2a/agents", bearer=signed(claims(**{claim: None})))
    assert_401(r)
    assert claim in r.json()["detail"]


async def test_token_with_empty_sub_is_401(client: Client) -> None:
    assert_401(await client.call("GET", "/v1/a2a/agents", bearer=signed(claims(sub=""))))


@pytest.mark.parametrize(
    "change",
    [
        {"permissions": "*"},
        {"permissions": [1, 2]},
        {"teams": "red"},
        {"is_admin": "yes"},
        {"sub": 42},
        {"exp": "tomorrow"},
    ],
    ids=lambda c: next(iter(c)) + "=" + repr(next(iter(c.values()))),
)
async def test_token_with_a_claim_of_the_wrong_type_is_401(
    client: Client, change: dict[str, Any]
) -> None:
    assert_401(await client.call("GET", "/v1/a2a/agents", bearer=signed(claims(**change))))


async def test_valid_token_with_only_required_claims_is_accepted(client: Client) -> None:
    bare = signed({"sub": "alice@example.com", "exp": int(time.time()) + 60, "permissions": ["*"]})
    r = await client.call("GET", "/v1/a2a/agents", bearer=bare)
    assert r.status == 200, r.raw


# ---- 403: the permission table --------------------------------------------------------------

AGENT_BODY = {"name": "a", "endpointUrl": "http://127.0.0.1:9/", "protocolVersion": "1.0"}
UNKNOWN = str(uuid.uuid4())

# One request per permission kind, and what it answers when that permission is granted.
REQUESTS: dict[str, tuple[str, str, Any, int]] = {
    "a2a.read": ("GET", "/v1/a2a/agents", None, 200),
    "a2a.create": ("POST", "/v1/a2a/agents", AGENT_BODY, 201),
    "a2a.update": ("PATCH", f"/v1/a2a/agents/{UNKNOWN}", {"name": "b"}, 404),
    "a2a.delete": ("DELETE", f"/v1/a2a/agents/{UNKNOWN}", None, 404),
    "a2a.invoke": ("POST", f"/v1/a2a/{UNKNOWN}/messages", {"text": "hi"}, 404),
}


@pytest.mark.parametrize("permission", PERMISSION_KINDS)
async def test_route_without_its_permission_is_403(client: Client, permission: str) -> None:
    method, path, body, _ = REQUESTS[permission]
    others = [p for p in PERMISSION_KINDS if p != permission]
    r = await client.call(method, path, body, bearer=token(perms=others, admin=True))
    assert r.status == 403, r.raw
    assert r.headers["Content-Type"] == "application/problem+json"
    assert permission in r.json()["detail"]


@pytest.mark.parametrize("permission", PERMISSION_KINDS)
async def test_route_with_its_permission_alone_passes(client: Client, permission: str) -> None:
    method, path, body, expected = REQUESTS[permission]
    r = await client.call(method, path, body, bearer=token(perms=[permission]))
    assert r.status == expected, r.raw


@pytest.mark.parametrize("permission", PERMISSION_KINDS)
async def test_star_grants_every_permission(client: Client, permission: str) -> None:
    method, path, body, expected = REQUESTS[permission]
    r = await client.call(method, path, body, bearer=token(perms=["*"]))
    assert r.status == expected, r.raw


async def test_other_read_routes_need_read(client: Client) -> None:
    no_read = token(perms=["a2a.create", "a2a.update", "a2a.delete", "a2a.invoke"])
    for path in (
        f"/v1/a2a/agents/{UNKNOWN}",
        f"/v1/a2a/{UNKNOWN}/tasks",
        f"/v1/a2a/{UNKNOWN}/tasks/t1",
        f"/v1/a2a/{UNKNOWN}/tasks/t1/events",
    ):
        r = await client.call("GET", path, bearer=no_read)
        assert r.status == 403, (path, r.raw)


async def test_continue_and_cancel_need_invoke(client: Client) -> None:
    no_invoke = token(perms=["a2a.read", "a2a.create", "a2a.update", "a2a.delete"])
    for suffix in ("messages", "cancel"):
        path = f"/v1/a2a/{UNKNOWN}/tasks/t1/{suffix}"
        r = await client.call("POST", path, {"text": "hi"}, bearer=no_invoke)
        assert r.status == 403, (path, r.raw)


# ---- the table matches the shipped routes -------------------------------------------------


def test_every_route_the_router_serves_has_a_permission_or_is_public(
    settings: Settings,
) -> None:
    served = create_app(settings).entries
    assert len(served) == len(ROUTES)
    assert [entry.permission for entry in served if not entry.permission] == []


def test_public_routes_are_health_readiness_the_api_description_the_console_jwks_and_push_in() -> (
    None
):
    assert {(route.method, route.path) for route in ROUTES if route.permission == PUBLIC} == {
        ("GET", "/"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/docs/"),
        ("GET", "/docs/{asset}"),
        # the console's page and assets, and the exchange of its one-time sign-in code
        ("GET", "/console"),
        ("GET", "/console/"),
        ("GET", "/console/{asset}"),
        ("POST", "/console/sign-in"),
        ("GET", "/.well-known/jwks.json"),
        # an agent's push: no caller token, its config's own token (SPEC §19)
        ("POST", "/v1/a2a/push-in/{config_id:uuid}"),
    }


async def extra(request: Request) -> StarletteResponse:
    return StarletteResponse("reached")


async def test_route_missing_from_the_table_is_denied_even_for_star_admin(
    settings: Settings,
) -> None:
    app = create_app(settings, routes=[*ROUTES, Route("/v1/a2a/extra", extra, methods=["GET"])])
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        client = Client(base, session, token(perms=["*"], admin=True))
        r = await client.call("GET", "/v1/a2a/extra")
        assert r.status == 403, r.raw
        assert r.headers["Content-Type"] == "application/problem+json"
        assert b"reached" not in r.raw
        r = await client.call("GET", "/v1/a2a/agents")
        assert r.status == 200, r.raw


async def test_a_token_accepted_before_is_refused_once_it_expires(client: Client) -> None:
    short = mint_token(JWT_SECRET, "alice@example.com", ["*"], ttl_s=1)
    expires = jwt.decode(short, options={"verify_signature": False})["exp"]
    assert (await client.call("GET", "/v1/a2a/agents", bearer=short)).status == 200
    await asyncio.sleep(max(0.0, expires - time.time()) + 0.05)
    r = await client.call("GET", "/v1/a2a/agents", bearer=short)
    assert r.status == 401
    assert "expired" in r.json()["detail"]


async def test_two_authorization_headers_are_401(client: Client) -> None:
    headers = CIMultiDict(
        [("Authorization", f"Bearer {token()}"), ("Authorization", f"Bearer {token('bob@x')}")]
    )
    async with client.session.get(client.base + "/v1/a2a/agents", headers=headers) as r:
        body = await r.read()
        assert r.status == 401, body
        assert r.headers["Content-Type"].startswith("application/problem+json")
        assert "one Authorization header" in msgspec.json.decode(body)["detail"]
