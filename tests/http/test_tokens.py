"""Tokens for real deployments: RS256/ES256 through a JWKS endpoint, issuer, audience, claims."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import asyncpg
import jwt
import msgspec
import pytest
from aiohttp import web

from a2a_continue.app import create_app
from a2a_continue.errors import Unauthorized
from a2a_continue.http.tokens import TokenVerifier
from a2a_continue.settings import Settings, SettingsError, load_settings
from tests.support.client import JWT_SECRET, Client
from tests.support.identity import AUDIENCE, ISSUER, Keys, idp, refused, whoami
from tests.support.ports import dead_url
from tests.support.servers import serve_aiohttp, serve_asgi
from tests.support.sockets import Sockets
from tests.support.spellings import REFUSED_SPELLINGS

JSON = dict[str, Any]


def hs256(**claims: Any) -> str:
    body = {
        "sub": "dave@example.com",
        "exp": int(time.time()) + 600,
        "permissions": ["*"],
        **claims,
    }
    return jwt.encode({k: v for k, v in body.items() if v is not None}, JWT_SECRET, "HS256")


@pytest.fixture
async def keys() -> AsyncIterator[tuple[Keys, str]]:
    """A local JWKS endpoint serving ``keys.published``; yields the keys and its URL."""
    keys = Keys()
    keys.add_rsa("rsa-1")

    async def jwks(request: web.Request) -> web.Response:
        keys.fetches += 1
        return web.json_response({"keys": keys.published})

    app = web.Application()
    app.router.add_get("/jwks.json", jwks)
    async with serve_aiohttp(app) as base:
        yield keys, base + "/jwks.json"


GatewayFactory = Callable[..., contextlib.AbstractAsyncContextManager[Client]]


@pytest.fixture
def gateway(settings: Settings, db: asyncpg.Connection) -> GatewayFactory:
    """Start a gateway with changed settings; yield a client without a default token."""

    @contextlib.asynccontextmanager
    async def start(**changes: Any) -> AsyncIterator[Client]:
        changed = msgspec.structs.replace(settings, **changes)
        async with (
            serve_asgi(create_app(changed)) as base,
            aiohttp.ClientSession() as session,
        ):
            yield Client(base, session, bearer=None)

    return start


async def test_an_rs256_token_from_the_jwks_is_accepted(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    async with gateway(**idp(url)) as client:
        r = await whoami(client, idp_keys.sign("rsa-1"))
    assert r.status == 201, r.raw
    assert r.json()["owner"] == "carol@example.com"


async def test_an_es256_token_from_the_jwks_is_accepted(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    idp_keys.add_ec("ec-1")
    async with gateway(**idp(url)) as client:
        r = await whoami(client, idp_keys.sign("ec-1", alg="ES256", sub="erin@example.com"))
    assert r.status == 201, r.raw
    assert r.json()["owner"] == "erin@example.com"


async def test_keys_are_fetched_once_and_cached(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    async with gateway(**idp(url)) as client:
        for n in range(3):
            r = await whoami(client, idp_keys.sign("rsa-1", jti=f"t{n}"))
            assert r.status == 201, r.raw
    assert idp_keys.fetches == 1


async def test_a_token_for_another_audience_is_401(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    async with gateway(**idp(url)) as client:
        detail = refused(await whoami(client, idp_keys.sign("rsa-1", aud="someone-else")))
        assert detail == "the token is not meant for this gateway (audience)"
        missing = refused(await whoami(client, idp_keys.sign("rsa-1", aud=None)))
        assert "aud" in missing


async def test_a_token_from_another_issuer_is_401(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    async with gateway(**idp(url)) as client:
        detail = refused(await whoami(client, idp_keys.sign("rsa-1", iss="https://evil/")))
        assert detail == "the token comes from another issuer"
        assert "iss" in refused(await whoami(client, idp_keys.sign("rsa-1", iss=None)))


async def test_an_unknown_kid_refreshes_the_key_set_then_is_401(
    settings: Settings, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    idp_keys.add_rsa("rsa-unpublished", publish=False)
    verifier = TokenVerifier(msgspec.structs.replace(settings, **idp(url)), jwks_cooldown_s=0)
    assert (await verifier.caller(idp_keys.sign("rsa-1"))).sub == "carol@example.com"
    assert idp_keys.fetches == 1
    with pytest.raises(Unauthorized) as refusal:
        await verifier.caller(idp_keys.sign("rsa-unpublished"))
    assert str(refusal.value) == "the token is signed with an unknown key 'rsa-unpublished'"
    assert idp_keys.fetches == 2


async def test_a_rotated_key_is_found_by_refreshing_on_its_unknown_kid(
    settings: Settings, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    verifier = TokenVerifier(msgspec.structs.replace(settings, **idp(url)), jwks_cooldown_s=0)
    assert (await verifier.caller(idp_keys.sign("rsa-1"))).sub == "carol@example.com"
    idp_keys.add_rsa("rsa-2")  # the provider rotates after the gateway cached its keys
    rotated = await verifier.caller(idp_keys.sign("rsa-2", sub="rot@example.com"))
    assert rotated.sub == "rot@example.com"
    assert idp_keys.fetches == 2


async def test_an_unknown_kid_within_the_cool_down_does_not_refetch(
    settings: Settings, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    idp_keys.add_rsa("rsa-x", publish=False)
    verifier = TokenVerifier(msgspec.structs.replace(settings, **idp(url)), jwks_cooldown_s=3600)
    await verifier.caller(idp_keys.sign("rsa-1"))
    for n in range(3):
        with pytest.raises(Unauthorized, match="unknown key"):
            await verifier.caller(idp_keys.sign("rsa-x", jti=str(n)))
    assert idp_keys.fetches == 1


async def test_hs256_tokens_still_work_beside_the_jwks(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    _, url = keys
    async with gateway(jwks_url=url) as client:
        r = await whoami(client, hs256())
    assert r.status == 201, r.raw
    assert r.json()["owner"] == "dave@example.com"


async def test_issuer_and_audience_are_checked_on_hs256_tokens_too(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    _, url = keys
    async with gateway(**idp(url)) as client:
        assert '"iss"' in refused(await whoami(client, hs256()))
        assert '"aud"' in refused(await whoami(client, hs256(iss=ISSUER)))
        assert "audience" in refused(await whoami(client, hs256(iss=ISSUER, aud="other")))
        ok = await whoami(client, hs256(iss=ISSUER, aud=[AUDIENCE, "other"]))
    assert ok.status == 201, ok.raw


async def test_an_rs256_token_without_a_jwks_is_401(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, _ = keys
    async with gateway() as client:
        detail = refused(await whoami(client, idp_keys.sign("rsa-1")))
    assert detail == "the token is invalid: algorithm 'RS256' is not accepted"


async def test_a_jwks_only_gateway_refuses_hs256(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    async with gateway(jwt_secret="", **idp(url)) as client:
        assert (await whoami(client, idp_keys.sign("rsa-1"))).status == 201
        detail = refused(await whoami(client, hs256(iss=ISSUER, aud=AUDIENCE)))
    assert detail == "the token is invalid: algorithm 'HS256' is not accepted"


async def test_a_token_without_kid_is_401(gateway: GatewayFactory, keys: tuple[Keys, str]) -> None:
    idp_keys, url = keys
    body = {"sub": "x@example.com", "exp": int(time.time()) + 60, "iss": ISSUER, "aud": AUDIENCE}
    token = jwt.encode(body, idp_keys.private["rsa-1"], algorithm="RS256")
    async with gateway(**idp(url)) as client:
        assert refused(await whoami(client, token)) == (
            "the token is invalid: its header names no key ('kid')"
        )


async def test_an_unreachable_key_set_is_401(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, _ = keys
    async with gateway(**idp(dead_url() + "jwks.json")) as client:
        detail = refused(await whoami(client, idp_keys.sign("rsa-1")))
    assert detail == "the token cannot be verified: the key set cannot be had"


@pytest.mark.parametrize(
    "answer",
    [
        web.Response(status=500),
        web.Response(text="<html>", content_type="text/html"),
        web.json_response(["not", "an", "object"]),
        web.Response(body=b"{" + b" " * (1024 * 1024 + 1) + b"}", content_type="application/json"),
    ],
    ids=["500", "html", "list", "too-large"],
)
async def test_a_key_set_that_cannot_be_used_is_401(
    gateway: GatewayFactory, keys: tuple[Keys, str], answer: web.Response
) -> None:
    idp_keys, _ = keys

    async def broken(request: web.Request) -> web.Response:
        return answer

    app = web.Application()
    app.router.add_get("/jwks.json", broken)
    async with serve_aiohttp(app) as base, gateway(**idp(base + "/jwks.json")) as client:
        detail = refused(await whoami(client, idp_keys.sign("rsa-1")))
    assert detail == "the token cannot be verified: the key set cannot be had"


async def test_an_expired_idp_token_is_401(gateway: GatewayFactory, keys: tuple[Keys, str]) -> None:
    idp_keys, url = keys
    async with gateway(**idp(url)) as client:
        expired = idp_keys.sign("rsa-1", exp=int(time.time()) - 60)
        assert refused(await whoami(client, expired)) == "the token has expired"


async def test_claim_names_follow_the_identity_provider(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    names = {
        "jwt_claims_permissions": "scope",
        "jwt_claims_teams": "groups",
        "jwt_claims_is_admin": "admin",
    }
    async with gateway(**idp(url, **names)) as client:
        reader = idp_keys.sign("rsa-1", permissions=None, scope="a2a.read a2a.invoke")
        assert (await client.call("GET", "/v1/a2a/agents", bearer=reader)).status == 200
        assert (await whoami(client, reader)).status == 403
        member = idp_keys.sign("rsa-1", permissions=None, scope="*", groups=["blue"])
        team_agent = await whoami(client, member)
        assert team_agent.status == 201
        body = {"visibility": "team", "teamId": "blue"}
        path = f"/v1/a2a/agents/{team_agent.json()['id']}"
        assert (await client.call("PATCH", path, body, bearer=member)).status == 200
        other = idp_keys.sign("rsa-1", sub="frank@example.com", scope="*", groups="blue")
        assert (await client.call("GET", path, bearer=other)).status == 200
        stranger = idp_keys.sign("rsa-1", sub="gus@example.com", scope="*")
        assert (await client.call("GET", path, bearer=stranger)).status == 404
        admin = idp_keys.sign("rsa-1", sub="root@example.com", scope="*", admin=True)
        assert (await client.call("GET", path, bearer=admin)).status == 200
        # the gateway's own names mean nothing in an identity provider's token
        not_admin = idp_keys.sign("rsa-1", sub="mallory@example.com", scope="*", is_admin=True)
        assert (await client.call("GET", path, bearer=not_admin)).status == 404


async def test_an_idp_claim_of_the_wrong_type_is_401(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    async with gateway(**idp(url)) as client:
        assert "boolean" in refused(await whoami(client, idp_keys.sign("rsa-1", is_admin="yes")))
        assert "list of strings" in refused(await whoami(client, idp_keys.sign("rsa-1", teams=[1])))


def test_token_settings_are_read_from_their_variables() -> None:
    env = {
        "A2AC_JWKS_URL": "https://idp.example.com/jwks",
        "A2AC_JWT_ISSUER": ISSUER,
        "A2AC_JWT_AUDIENCE": AUDIENCE,
        "A2AC_JWT_CLAIMS_PERMISSIONS": "scope",
        "A2AC_JWT_CLAIMS_TEAMS": "groups",
        "A2AC_JWT_CLAIMS_IS_ADMIN": "admin",
    }
    settings = load_settings(env)
    assert (settings.jwks_url, settings.jwt_issuer, settings.jwt_audience) == (
        "https://idp.example.com/jwks",
        ISSUER,
        AUDIENCE,
    )
    assert (
        settings.jwt_claims_permissions,
        settings.jwt_claims_teams,
        settings.jwt_claims_is_admin,
    ) == ("scope", "groups", "admin")
    default = load_settings({})
    assert (default.jwt_claims_permissions, default.jwt_claims_teams) == ("permissions", "teams")
    assert default.jwt_claims_is_admin == "is_admin"


def test_a_jwks_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(SettingsError, match="A2AC_JWKS_URL must be an http"):
        load_settings({"A2AC_JWKS_URL": "file:///etc/keys.json"})


@pytest.mark.parametrize("host", sorted(REFUSED_SPELLINGS))
def test_a_jwks_url_at_a_refused_address_stops_the_start(settings: Settings, host: str) -> None:
    changed = msgspec.structs.replace(settings, jwks_url=f"http://{host}/jwks.json")
    with pytest.raises(SettingsError, match="A2AC_JWKS_URL is at a refused address"):
        TokenVerifier(changed)
    with pytest.raises(SettingsError, match=re.escape(REFUSED_SPELLINGS[host])):
        create_app(changed)


async def test_the_key_set_is_fetched_through_the_address_guard(
    gateway: GatewayFactory, keys: tuple[Keys, str], sockets: Sockets
) -> None:
    idp_keys, url = keys
    async with gateway(**idp(url)) as client:
        r = await whoami(client, idp_keys.sign("rsa-1"))
    assert r.status == 201, r.raw
    # The guarded connectors' sockets are the ones the tests record.
    assert sockets.to_port(int(url.split("/")[2].rsplit(":", 1)[1])) == ["127.0.0.1"]


async def test_an_idp_token_with_nul_in_sub_or_groups_is_401(
    gateway: GatewayFactory, keys: tuple[Keys, str]
) -> None:
    idp_keys, url = keys
    async with gateway(**idp(url, jwt_claims_teams="groups")) as client:
        for claims in ({"sub": "carol\x00@example.com"}, {"groups": "blue o\x00ps"}):
            detail = refused(await whoami(client, idp_keys.sign("rsa-1", **claims)))
            assert detail == "the token is invalid: sub and teams must not contain U+0000"
