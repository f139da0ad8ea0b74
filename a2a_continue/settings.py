"""Settings read once from the environment (prefix ``A2AC_``)."""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

# An allowed network of ``A2AC_AGENT_NETWORKS`` (read here, enforced by the address guard).
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(text: str) -> tuple[Network, ...]:
    """Read a comma-separated list of CIDRs (the ``A2AC_AGENT_NETWORKS`` setting)."""
    return tuple(
        ipaddress.ip_network(item.strip(), strict=False) for item in text.split(",") if item.strip()
    )


MIB = 1024 * 1024
# The longest request head (request line and headers) a server of the gateway reads.
MAX_HEADER_BYTES = 64 * 1024
MIN_HEADER_BYTES = 1024


class SettingsError(ValueError):
    """A setting in the environment has a value the service cannot use."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the service reads from its environment."""

    database_url: str | None = None
    data_dir: Path = Path("~/.local/share/a2a-continue").expanduser()
    host: str = "127.0.0.1"
    port: int = 8080
    jwt_secret: str = ""
    encryption_key: str = ""
    agent_timeout_s: float = 30.0
    max_body_bytes: int = MIB
    max_header_bytes: int = MAX_HEADER_BYTES
    max_agent_response_bytes: int = 8 * MIB
    claim_margin_s: float = 5.0
    pool_size: int = 10
    watch_concurrency: int = 100
    watch_max_s: float = 86400.0
    watch_lease_s: float = 30.0
    watch_renew_s: float = 10.0
    watch_pickup_s: float = 5.0
    watch_poll_base_s: float = 1.0
    watch_poll_max_s: float = 30.0
    idempotency_ttl_s: float = 86400.0
    idempotency_sweep_s: float = 300.0
    workers: int = 1
    drain_s: float = 30.0
    log_format: str = "text"
    log_level: str = "info"
    jwks_url: str = ""
    jwt_issuer: str = ""
    jwt_audience: str = ""
    jwt_claims_permissions: str = "permissions"
    jwt_claims_teams: str = "teams"
    jwt_claims_is_admin: str = "is_admin"
    db_timeout_s: float = 5.0
    agent_concurrency: int = 20
    agent_networks: tuple[Network, ...] = ()
    body_timeout_s: float = 10.0
    claim_sweep_s: float = 30.0
    stream_max_s: float = 3600.0
    # Measured (docs/growth.md): 10,000 idle streams take ~20 KB each, no stall over 250 ms.
    max_streams: int = 10_000
    keepalive_s: float = 15.0
    stream_poll_s: float = 3.0
    listen: bool = True
    public_url: str | None = None
    # The console (SPEC §13): how long a sign-in code of `a2a-continue console` may wait to
    # be used, and how long the token it is exchanged for lasts.
    console_code_ttl_s: float = 300.0
    console_token_ttl_s: float = 3600.0
    # A real topology: replicas behind a load balancer, a connection pooler before PostgreSQL.
    # Prepared statements asyncpg keeps per connection (0: none, for transaction pooling).
    db_statement_cache: int = 100
    # Where each process's one LISTEN connection goes (straight to PostgreSQL); unset: the
    # database URL.
    listen_database_url: str | None = None
    # -- push notifications (SPEC §12) --
    push_networks: tuple[Network, ...] = ()
    push_max_attempts: int = 8
    push_concurrency: int = 50
    push_timeout_s: float = 10.0
    push_retry_base_s: float = 1.0
    push_retry_max_s: float = 300.0
    push_lease_s: float = 60.0
    push_poll_s: float = 5.0
    push_signing_key: str = ""
    push_dispatch: bool = True
    # -- signed agent cards (SPEC §18) --
    card_signatures: str = "record"
    card_signing_key: str = ""

    # ---- growth: retention (§14) ----
    retention_days: float | None = None
    retention_sweep_s: float = 3600.0
    retention_batch: int = 500

    # ---- fair shares (§20): None = no limit of that kind ----
    limit_caller_rps: float | None = None
    limit_caller_burst: int | None = None
    limit_caller_inflight: int | None = None
    limit_team_rps: float | None = None
    limit_team_burst: int | None = None
    limit_team_inflight: int | None = None
    # How often each process reads the admins' overrides (they apply within 5 s).
    limit_poll_s: float = 2.0


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{name} must be a finite number greater than 0, got {raw!r}")
    return value


def _integer(env: Mapping[str, str], name: str, default: int, high: int | None = None) -> int:
    value = float(_number(env, name, default))
    if not value.is_integer() or (high is not None and value > high):
        limit = f" up to {high}" if high is not None else ""
        raise SettingsError(f"{name} must be a whole number{limit}, got {env[name]!r}")
    return int(value)


def _header_bytes(env: Mapping[str, str]) -> int:
    value = _integer(env, "A2AC_MAX_HEADER_BYTES", MAX_HEADER_BYTES)
    if value < MIN_HEADER_BYTES:
        raise SettingsError(
            f"A2AC_MAX_HEADER_BYTES must be at least {MIN_HEADER_BYTES} (ordinary requests"
            f" need that much), got {env['A2AC_MAX_HEADER_BYTES']!r}"
        )
    return value


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole number, 0 included."""
    raw = (env.get(name) or "").strip()
    if raw == "":
        return default
    if not raw.isdigit():
        raise SettingsError(f"{name} must be a whole number (0 or more), got {env[name]!r}")
    return int(raw)


def _http_url(env: Mapping[str, str], name: str) -> str:
    raw = env.get(name, "")
    if raw and not raw.startswith(("http://", "https://")):
        raise SettingsError(f"{name} must be an http(s) URL, got {raw!r}")
    return raw


def _networks(env: Mapping[str, str], name: str) -> tuple[Network, ...]:
    try:
        return parse_networks(env.get(name, ""))
    except ValueError as exc:
        raise SettingsError(f"{name} must be comma-separated CIDRs: {exc}") from None


MIN_JWT_SECRET_BYTES = 32


def check_jwt_secret(secret: str) -> None:
    """Refuse an HS256 secret shorter than 32 bytes (RFC 7518 wants at least the hash size)."""
    if len(secret.encode()) < MIN_JWT_SECRET_BYTES:
        raise SettingsError(f"A2AC_JWT_SECRET must be at least {MIN_JWT_SECRET_BYTES} bytes long")


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name} must be true or false, got {env[name]!r}")


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Build the settings from ``env`` (default: the process environment)."""
    env = os.environ if env is None else env
    data_dir = env.get("A2AC_DATA_DIR") or "~/.local/share/a2a-continue"
    settings = Settings(
        database_url=env.get("A2AC_DATABASE_URL") or None,
        data_dir=Path(data_dir).expanduser(),
        host=env.get("A2AC_HOST") or "127.0.0.1",
        port=_integer(env, "A2AC_PORT", 8080, high=65535),
        jwt_secret=env.get("A2AC_JWT_SECRET", ""),
        encryption_key=env.get("A2AC_ENCRYPTION_KEY", ""),
        agent_timeout_s=_number(env, "A2AC_AGENT_TIMEOUT_S", 30.0),
        max_body_bytes=_integer(env, "A2AC_MAX_BODY_BYTES", MIB),
        max_header_bytes=_header_bytes(env),
        max_agent_response_bytes=_integer(env, "A2AC_MAX_AGENT_RESPONSE_BYTES", 8 * MIB),
        claim_margin_s=_number(env, "A2AC_CLAIM_MARGIN_S", 5.0),
        pool_size=_integer(env, "A2AC_POOL_SIZE", 10),
        watch_concurrency=_integer(env, "A2AC_WATCH_CONCURRENCY", 100),
        watch_max_s=_number(env, "A2AC_WATCH_MAX_S", 86400.0),
        watch_lease_s=_number(env, "A2AC_WATCH_LEASE_S", 30.0),
        watch_renew_s=_number(env, "A2AC_WATCH_RENEW_S", 10.0),
        watch_pickup_s=_number(env, "A2AC_WATCH_PICKUP_S", 5.0),
        watch_poll_base_s=_number(env, "A2AC_WATCH_POLL_BASE_S", 1.0),
        watch_poll_max_s=_number(env, "A2AC_WATCH_POLL_MAX_S", 30.0),
        idempotency_ttl_s=_number(env, "A2AC_IDEMPOTENCY_TTL_S", 86400.0),
        idempotency_sweep_s=_number(env, "A2AC_IDEMPOTENCY_SWEEP_S", 300.0),
        workers=_integer(env, "A2AC_WORKERS", 1, high=256),
        drain_s=_number(env, "A2AC_DRAIN_S", 30.0),
        log_format=_choice(env, "A2AC_LOG_FORMAT", ("text", "json")),
        log_level=_choice(env, "A2AC_LOG_LEVEL", ("info", "debug", "warning", "error")),
        jwks_url=_http_url(env, "A2AC_JWKS_URL"),
        jwt_issuer=env.get("A2AC_JWT_ISSUER", ""),
        jwt_audience=env.get("A2AC_JWT_AUDIENCE", ""),
        jwt_claims_permissions=env.get("A2AC_JWT_CLAIMS_PERMISSIONS") or "permissions",
        jwt_claims_teams=env.get("A2AC_JWT_CLAIMS_TEAMS") or "teams",
        jwt_claims_is_admin=env.get("A2AC_JWT_CLAIMS_IS_ADMIN") or "is_admin",
        db_timeout_s=_number(env, "A2AC_DB_TIMEOUT_S", 5.0),
        agent_concurrency=_integer(env, "A2AC_AGENT_CONCURRENCY", 20),
        agent_networks=_networks(env, "A2AC_AGENT_NETWORKS"),
        body_timeout_s=_number(env, "A2AC_BODY_TIMEOUT_S", 10.0),
        claim_sweep_s=_number(env, "A2AC_CLAIM_SWEEP_S", 30.0),
        stream_max_s=_number(env, "A2AC_STREAM_MAX_S", 3600.0),
        max_streams=_integer(env, "A2AC_MAX_STREAMS", 10_000),
        keepalive_s=_number(env, "A2AC_KEEPALIVE_S", 15.0),
        stream_poll_s=_number(env, "A2AC_STREAM_POLL_S", 3.0),
        listen=_flag(env, "A2AC_LISTEN", True),
        public_url=env.get("A2AC_PUBLIC_URL") or None,
        # The console
        console_code_ttl_s=_number(env, "A2AC_CONSOLE_CODE_TTL_S", 300.0),
        console_token_ttl_s=_number(env, "A2AC_CONSOLE_TOKEN_TTL_S", 3600.0),
        # A real topology: replicas, a connection pooler.
        db_statement_cache=_count(env, "A2AC_DB_STATEMENT_CACHE", 100),
        listen_database_url=env.get("A2AC_LISTEN_DATABASE_URL") or None,
        # -- push notifications (SPEC §12) --
        push_networks=_networks(env, "A2AC_PUSH_NETWORKS"),
        push_max_attempts=_integer(env, "A2AC_PUSH_MAX_ATTEMPTS", 8),
        push_concurrency=_integer(env, "A2AC_PUSH_CONCURRENCY", 50),
        push_timeout_s=_number(env, "A2AC_PUSH_TIMEOUT_S", 10.0),
        push_retry_base_s=_number(env, "A2AC_PUSH_RETRY_BASE_S", 1.0),
        push_retry_max_s=_number(env, "A2AC_PUSH_RETRY_MAX_S", 300.0),
        push_lease_s=_number(env, "A2AC_PUSH_LEASE_S", 60.0),
        push_poll_s=_number(env, "A2AC_PUSH_POLL_S", 5.0),
        push_signing_key=env.get("A2AC_PUSH_SIGNING_KEY", ""),
        push_dispatch=_flag(env, "A2AC_PUSH_DISPATCH", True),
        # -- signed agent cards (SPEC §18) --
        card_signatures=_choice(env, "A2AC_CARD_SIGNATURES", ("record", "require")),
        card_signing_key=env.get("A2AC_CARD_SIGNING_KEY", ""),
        # ---- growth: retention (§14) ----
        retention_days=_number(env, "A2AC_RETENTION_DAYS", 0.0) or None,
        retention_sweep_s=_number(env, "A2AC_RETENTION_SWEEP_S", 3600.0),
        retention_batch=_integer(env, "A2AC_RETENTION_BATCH", 500, high=10_000),
        # ---- fair shares (§20) ----
        limit_caller_rps=_number(env, "A2AC_LIMIT_CALLER_RPS", 0.0) or None,
        limit_caller_burst=_integer(env, "A2AC_LIMIT_CALLER_BURST", 0) or None,
        limit_caller_inflight=_integer(env, "A2AC_LIMIT_CALLER_INFLIGHT", 0) or None,
        limit_team_rps=_number(env, "A2AC_LIMIT_TEAM_RPS", 0.0) or None,
        limit_team_burst=_integer(env, "A2AC_LIMIT_TEAM_BURST", 0) or None,
        limit_team_inflight=_integer(env, "A2AC_LIMIT_TEAM_INFLIGHT", 0) or None,
    )
    return _check_watch(settings)


def _check_watch(settings: Settings) -> Settings:
    """A watch lease must outlive its renewal period; the back-off must grow, not shrink."""
    if settings.watch_renew_s >= settings.watch_lease_s:
        raise SettingsError("A2AC_WATCH_RENEW_S must be shorter than A2AC_WATCH_LEASE_S")
    if settings.watch_poll_base_s > settings.watch_poll_max_s:
        raise SettingsError("A2AC_WATCH_POLL_BASE_S must not exceed A2AC_WATCH_POLL_MAX_S")
    return settings


def _choice(env: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str:
    """One of ``allowed`` (any case); the first is the default."""
    raw = (env.get(name) or allowed[0]).strip().lower()
    if raw not in allowed:
        raise SettingsError(f"{name} must be one of {', '.join(allowed)}; got {env[name]!r}")
    return raw
