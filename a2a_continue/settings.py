"""Settings read once from the environment (prefix ``A2AC_``)."""

from __future__ import annotations

import ipaddress
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

# An allowed network of ``A2AC_AGENT_NETWORKS`` (read here, enforced by the address guard).
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Networks(tuple[Network, ...]):
    """Allowed networks, read from a comma-separated list of CIDRs."""

    __slots__ = ()


def parse_networks(text: str) -> Networks:
    """Read a comma-separated list of CIDRs (the ``A2AC_AGENT_NETWORKS`` setting)."""
    return Networks(
        ipaddress.ip_network(item.strip(), strict=False) for item in text.split(",") if item.strip()
    )


MIB = 1024 * 1024
# The longest request head (request line and headers) a server of the gateway reads.
MAX_HEADER_BYTES = 64 * 1024
MIN_HEADER_BYTES = 1024


# A duration or a rate: a finite number above 0 (1e9 s is some thirty years; 1e9 a second).
Seconds = Annotated[float, Meta(gt=0, le=1e9)]
# A count or a size: a whole number above 0.
Whole = Annotated[int, Meta(ge=1)]
PREFIX = "A2AC_"


class SettingsError(ValueError):
    """A setting in the environment has a value the service cannot use."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the service reads from its environment: each field from ``A2AC_`` and its
    name in capitals (``agent_timeout_s`` from ``A2AC_AGENT_TIMEOUT_S``), its default and its
    constraints written here once; an unset or empty variable keeps the default."""

    database_url: str | None = None
    data_dir: Path = Path("~/.local/share/a2a-continue").expanduser()
    host: str = "127.0.0.1"
    port: Annotated[int, Meta(ge=1, le=65535)] = 8080
    jwt_secret: str = ""
    encryption_key: str = ""
    agent_timeout_s: Seconds = 30.0
    max_body_bytes: Whole = MIB
    max_header_bytes: Annotated[int, Meta(ge=MIN_HEADER_BYTES)] = MAX_HEADER_BYTES
    max_agent_response_bytes: Whole = 8 * MIB
    claim_margin_s: Seconds = 5.0
    pool_size: Whole = 10
    watch_concurrency: Whole = 100
    watch_max_s: Seconds = 86400.0
    watch_lease_s: Seconds = 30.0
    watch_renew_s: Seconds = 10.0
    watch_pickup_s: Seconds = 5.0
    watch_poll_base_s: Seconds = 1.0
    watch_poll_max_s: Seconds = 30.0
    idempotency_ttl_s: Seconds = 86400.0
    idempotency_sweep_s: Seconds = 300.0
    workers: Annotated[int, Meta(ge=1, le=256)] = 1
    drain_s: Seconds = 30.0
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["info", "debug", "warning", "error"] = "info"
    jwks_url: str = ""
    jwt_issuer: str = ""
    jwt_audience: str = ""
    jwt_claims_permissions: str = "permissions"
    jwt_claims_teams: str = "teams"
    jwt_claims_is_admin: str = "is_admin"
    db_timeout_s: Seconds = 5.0
    agent_concurrency: Whole = 20
    agent_networks: Networks = Networks()
    body_timeout_s: Seconds = 10.0
    claim_sweep_s: Seconds = 30.0
    stream_max_s: Seconds = 3600.0
    # Measured (docs/growth.md): 10,000 idle streams take ~20 KB each, no stall over 250 ms.
    max_streams: Whole = 10_000
    keepalive_s: Seconds = 15.0
    stream_poll_s: Seconds = 3.0
    listen: bool = True
    public_url: str | None = None
    # The console (SPEC §13): how long a sign-in code of `a2a-continue console` may wait to
    # be used, and how long the token it is exchanged for lasts.
    console_code_ttl_s: Seconds = 300.0
    console_token_ttl_s: Seconds = 3600.0
    # A real topology: replicas behind a load balancer, a connection pooler before PostgreSQL.
    # Prepared statements asyncpg keeps per connection (0: none, for transaction pooling).
    db_statement_cache: Annotated[int, Meta(ge=0)] = 100
    # Where each process's one LISTEN connection goes (straight to PostgreSQL); unset: the
    # database URL.
    listen_database_url: str | None = None
    # -- push notifications (SPEC §12) --
    push_networks: Networks = Networks()
    push_max_attempts: Whole = 8
    push_concurrency: Whole = 50
    push_timeout_s: Seconds = 10.0
    push_retry_base_s: Seconds = 1.0
    push_retry_max_s: Seconds = 300.0
    push_lease_s: Seconds = 60.0
    push_poll_s: Seconds = 5.0
    push_signing_key: str = ""
    push_dispatch: bool = True
    # -- push in (SPEC §19): how often a task whose agent pushes is checked with one GetTask --
    push_in_check_s: Seconds = 60.0
    # -- signed agent cards (SPEC §18) --
    card_signatures: Literal["record", "require"] = "record"
    card_signing_key: str = ""

    # ---- growth: retention (§14) ----
    retention_days: Annotated[float, Meta(gt=0, le=1e6)] | None = None
    retention_sweep_s: Seconds = 3600.0
    retention_batch: Annotated[int, Meta(ge=1, le=10_000)] = 500

    # ---- fair shares (§20): None = no limit of that kind ----
    limit_caller_rps: Seconds | None = None
    limit_caller_burst: Whole | None = None
    limit_caller_inflight: Whole | None = None
    limit_team_rps: Seconds | None = None
    limit_team_burst: Whole | None = None
    limit_team_inflight: Whole | None = None
    # How often each process reads the admins' overrides (they apply within 5 s).
    limit_poll_s: Seconds = 2.0


MIN_JWT_SECRET_BYTES = 32


def check_jwt_secret(secret: str) -> None:
    """Refuse an HS256 secret shorter than 32 bytes (RFC 7518 wants at least the hash size)."""
    if len(secret.encode()) < MIN_JWT_SECRET_BYTES:
        raise SettingsError(f"A2AC_JWT_SECRET must be at least {MIN_JWT_SECRET_BYTES} bytes long")


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _raw(hint: Any, text: str) -> object:
    """An environment value as ``msgspec.convert`` reads it into a field of type ``hint``."""
    if hint is str or hint == str | None:
        return text  # as given: a secret's spaces are the secret's
    text = text.strip()
    if hint is bool:
        low = text.lower()
        return True if low in _TRUE else False if low in _FALSE else text
    if typing.get_origin(hint) is Literal:
        return text.lower()
    return text


def _decode_hook(kind: type, value: Any) -> Any:
    if kind is Networks and isinstance(value, str):
        return parse_networks(value)
    if kind is Path and isinstance(value, str):
        return Path(value).expanduser()
    raise NotImplementedError


def _sentence(hint: Any, message: str) -> str:
    """What msgspec says is expected, as the sentence after "must be"."""
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(typing.get_args(hint))
    if hint is Networks:
        return f"comma-separated CIDRs ({message.partition(' - at ')[0]})"
    expected = message.partition(" - at ")[0].removeprefix("Expected ")
    expected = expected.split(", got ")[0]
    for name, words in (("`int`", "a whole number"), ("`float`", "a number"),
                        ("`bool`", "true or false")):  # fmt: skip
        expected = expected.replace(name, words)
    return expected


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Build the settings from ``env`` (default: the process environment)."""
    env = os.environ if env is None else env
    hints = {field.name: field.type for field in msgspec.structs.fields(Settings)}
    given = {}
    for field_name, hint in hints.items():
        text = env.get(PREFIX + field_name.upper())
        if text is not None and text.strip():
            given[field_name] = _raw(hint, text)
    try:
        settings = msgspec.convert(given, Settings, strict=False, dec_hook=_decode_hook)
    except (msgspec.ValidationError, ValueError) as exc:
        field_name = str(exc).rpartition("$.")[2].rstrip("`") if "$." in str(exc) else ""
        if field_name not in hints:
            raise SettingsError(str(exc)) from None
        name = PREFIX + field_name.upper()
        sentence = _sentence(hints[field_name], str(exc))
        raise SettingsError(f"{name} must be {sentence}, got {env[name]!r}") from None
    return _check_watch(_check_urls(settings))


def public_base_url(settings: Settings) -> str:
    """The gateway's public URL (``A2AC_PUBLIC_URL``, else its own host and port), no final /."""
    return (settings.public_url or f"http://{settings.host}:{settings.port}").rstrip("/")


def _check_urls(settings: Settings) -> Settings:
    if settings.jwks_url and not settings.jwks_url.startswith(("http://", "https://")):
        raise SettingsError(f"A2AC_JWKS_URL must be an http(s) URL, got {settings.jwks_url!r}")
    return settings


def _check_watch(settings: Settings) -> Settings:
    """A watch lease must outlive its renewal period; the back-off must grow, not shrink."""
    if settings.watch_renew_s >= settings.watch_lease_s:
        raise SettingsError("A2AC_WATCH_RENEW_S must be shorter than A2AC_WATCH_LEASE_S")
    if settings.watch_poll_base_s > settings.watch_poll_max_s:
        raise SettingsError("A2AC_WATCH_POLL_BASE_S must not exceed A2AC_WATCH_POLL_MAX_S")
    return settings
