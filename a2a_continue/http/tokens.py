"""Bearer token verification: HS256 with the shared secret, RS256/ES256 from a JWKS endpoint.

Issuer and audience, when configured, are checked on every token. Tokens verified through
the JWKS take ``permissions``, ``teams`` and ``is_admin`` from the claims the identity
provider uses (``A2AC_JWT_CLAIMS_*``); HS256 tokens, which the gateway mints itself, use the
gateway's own claim names.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import jwt

from a2a_continue.a2a.netguard import check_call_url, guarded_connector, url_problem
from a2a_continue.core.access.callers import Caller
from a2a_continue.errors import Unauthorized
from a2a_continue.limits import has_nul
from a2a_continue.settings import Settings, SettingsError

# Asymmetric algorithms accepted from the JWKS; HS256 only ever uses the shared secret, so a
# token cannot pass a public key off as an HMAC secret.
JWKS_ALGORITHMS = ("RS256", "ES256")
JWKS_TIMEOUT_S = 10.0
JWKS_LIFESPAN_S = 300.0
JWKS_COOLDOWN_S = 10.0
JWKS_MAX_BYTES = 1024 * 1024
NOT_A_JWT = "the bearer token is not a JWT (three base64url segments: header.payload.signature)"


def _names(value: Any, claim: str, from_idp: bool) -> list[str]:
    """A list claim; from an identity provider also a space-separated string (OAuth ``scope``)."""
    if value is None:
        return []
    if isinstance(value, str) and from_idp:
        return value.split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise Unauthorized(f"the token is invalid: claim {claim!r} must be a list of strings")


def check_jwks_url(url: str) -> None:
    """Refuse a JWKS URL at an address the gateway never connects to (SettingsError)."""
    problem = url_problem(url) if url else None
    if problem is not None:
        raise SettingsError(f"A2AC_JWKS_URL is at a refused address: {problem}")


class _KeySetClient(jwt.PyJWKClient):
    """PyJWKClient (key set cache, refresh on an unknown ``kid``) fetching with aiohttp.

    Its lookups run in a worker thread; a fetch is handed back to the event loop. The key set
    is the operator's, not an agent's: it is fetched with a session of its own (one per fetch;
    fetches are rare) through the address guard, without the agents' allow-list.
    """

    loop: asyncio.AbstractEventLoop | None = None

    def fetch_data(self) -> Any:
        """Fetch the key set on the event loop, wait for it here, and cache it."""
        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(self._fetch(), self.loop)
        try:
            data = future.result(self.timeout + 1)
        except TimeoutError:
            future.cancel()
            raise jwt.PyJWKClientConnectionError("timeout") from None
        if self.jwk_set_cache is not None:
            self.jwk_set_cache.put(data)
        # As PyJWKClient.fetch_data does: a fetch starts the refresh cool-down.
        self._last_successful_fetch = time.monotonic()
        return data

    async def _fetch(self) -> dict[str, Any]:
        """The key set as a JSON object; PyJWKClientConnectionError when it cannot be had."""
        try:
            check_call_url(self.uri)
            async with (
                aiohttp.ClientSession(connector=guarded_connector()) as session,
                asyncio.timeout(self.timeout),
                session.get(self.uri, headers=self.headers, allow_redirects=False) as answer,
            ):
                if answer.status != 200:
                    raise jwt.PyJWKClientConnectionError(f"HTTP {answer.status}")
                raw = bytearray()
                while chunk := await answer.content.read(64 * 1024):
                    raw += chunk
                    if len(raw) > JWKS_MAX_BYTES:
                        raise jwt.PyJWKClientConnectionError("too large")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise jwt.PyJWKClientConnectionError(type(exc).__name__) from None
        try:
            data = json.loads(raw)
        except ValueError:
            raise jwt.PyJWKClientConnectionError("not JSON") from None
        if not isinstance(data, dict):
            raise jwt.PyJWKClientConnectionError("not a JSON object")
        return data


class TokenVerifier:
    """Verify bearer tokens; remember each verified token until it expires."""

    def __init__(
        self,
        settings: Settings,
        *,
        cache_size: int = 4096,
        jwks_cooldown_s: float = JWKS_COOLDOWN_S,
    ) -> None:
        check_jwks_url(settings.jwks_url)
        self.secret = settings.jwt_secret
        self.issuer = settings.jwt_issuer or None
        self.audience = settings.jwt_audience or None
        self.claim_names = (
            settings.jwt_claims_permissions,
            settings.jwt_claims_teams,
            settings.jwt_claims_is_admin,
        )
        self.jwks = (
            _KeySetClient(
                settings.jwks_url,
                lifespan=JWKS_LIFESPAN_S,
                timeout=JWKS_TIMEOUT_S,
                cooldown_duration=jwks_cooldown_s,
            )
            if settings.jwks_url
            else None
        )
        self.cache_size = cache_size
        self._callers: dict[str, Caller] = {}

    async def caller(self, token: str) -> Caller:
        """Return the token's caller; raise Unauthorized for a bad or expired token."""
        known = self._callers.get(token)
        if known is not None and known.expires_at > time.time():
            return known
        caller = await self._verify(token)
        if len(self._callers) >= self.cache_size:
            self._callers.clear()
        self._callers[token] = caller
        return caller

    async def _verify(self, token: str) -> Caller:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise Unauthorized(NOT_A_JWT) from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"the token is invalid: {exc}") from None
        algorithm = header.get("alg")
        if algorithm == "HS256" and self.secret:
            claims = self._decode(token, self.secret, algorithm)
            return self._caller(claims, ("permissions", "teams", "is_admin"), from_idp=False)
        if algorithm in JWKS_ALGORITHMS and self.jwks is not None:
            key = await self._signing_key(header.get("kid"))
            claims = self._decode(token, key, algorithm)
            return self._caller(claims, self.claim_names, from_idp=True)
        raise Unauthorized(f"the token is invalid: algorithm {algorithm!r} is not accepted")

    async def _signing_key(self, kid: object) -> jwt.PyJWK:
        assert self.jwks is not None
        if not isinstance(kid, str) or not kid:
            raise Unauthorized("the token is invalid: its header names no key ('kid')")
        self.jwks.loop = asyncio.get_running_loop()
        try:
            # PyJWKClient looks keys up synchronously (and fetches when it must): in a thread.
            return await asyncio.to_thread(self.jwks.get_signing_key, kid)
        except jwt.PyJWKClientConnectionError:
            raise Unauthorized("the token cannot be verified: the key set cannot be had") from None
        except (jwt.PyJWKClientError, jwt.PyJWKSetError):
            raise Unauthorized(f"the token is signed with an unknown key {kid!r}") from None

    def _decode(self, token: str, key: Any, algorithm: str) -> dict[str, Any]:
        required = ["exp", "sub"]
        required += ["iss"] if self.issuer else []
        required += ["aud"] if self.audience else []
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                issuer=self.issuer,
                audience=self.audience,
                options={"require": required, "verify_aud": self.audience is not None},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the token has expired") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("the token signature is invalid") from None
        except jwt.DecodeError:  # after its subclass above: the segments do not decode
            raise Unauthorized(NOT_A_JWT) from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("the token is not meant for this gateway (audience)") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("the token comes from another issuer") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"the token is invalid: {exc}") from None
        return claims

    @staticmethod
    def _caller(claims: dict[str, Any], names: tuple[str, str, str], *, from_idp: bool) -> Caller:
        sub, exp = claims.get("sub"), claims.get("exp")
        if not isinstance(sub, str) or not sub:
            raise Unauthorized("the token is invalid: sub must be a non-empty string")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise Unauthorized("the token is invalid: exp must be a number")
        permissions, teams, is_admin = names
        admin = claims.get(is_admin, False)
        if not isinstance(admin, bool):
            raise Unauthorized(f"the token is invalid: claim {is_admin!r} must be a boolean")
        team_ids = _names(claims.get(teams), teams, from_idp)
        if has_nul(sub, *team_ids):
            # They are bound to SQL text parameters, which cannot hold U+0000.
            raise Unauthorized("the token is invalid: sub and teams must not contain U+0000")
        return Caller(
            sub=sub,
            permissions=frozenset(_names(claims.get(permissions), permissions, from_idp)),
            teams=tuple(team_ids),
            is_admin=admin,
            expires_at=float(exp),
        )
