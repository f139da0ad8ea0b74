"""What the commands of ``a2a-continue`` do: serve, migrate, token, console, prune.

``cli.py`` reads the command line and the settings; each function here gets the settings
(with the command line's overrides applied) and returns the exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import aiohttp
import asyncpg
import msgspec

from a2a_continue.core.access import console_codes
from a2a_continue.core.access.callers import mint_token
from a2a_continue.core.schema import migrate_url
from a2a_continue.core.tasks import retention
from a2a_continue.core.tasks.retention import Pruned
from a2a_continue.http.tokens import check_jwks_url
from a2a_continue.ops.startup import (
    StartupError,
    check_database,
    check_listen,
    check_port,
    shown_path,
    write_admin_token,
)
from a2a_continue.runtime.secrets import load_or_create_secrets, load_secrets, secrets_path
from a2a_continue.settings import Settings, SettingsError, check_jwt_secret

ADMIN = "admin@localhost"


def with_generated_secrets(settings: Settings) -> tuple[Settings, bool]:
    """Fill missing secrets from the data dir (created once); say whether any were filled."""
    if settings.jwt_secret and settings.encryption_key:
        return settings, False
    stored = load_or_create_secrets(settings.data_dir)
    return (
        msgspec.structs.replace(
            settings,
            jwt_secret=settings.jwt_secret or stored["jwt_secret"],
            encryption_key=settings.encryption_key or stored["encryption_key"],
        ),
        True,
    )


@contextmanager
def database(settings: Settings) -> Iterator[Settings]:
    """Yield the settings with a database URL, starting the embedded one when none is set."""
    if settings.database_url:
        yield settings
        return
    from a2a_continue.ops.embedded import embedded_database

    with embedded_database(settings.data_dir) as url:
        yield msgspec.structs.replace(settings, database_url=url)


def serve(settings: Settings) -> int:
    """Run the gateway until interrupted."""
    from a2a_continue.ops import serving

    embedded = not settings.database_url
    if embedded:
        settings, _generated = with_generated_secrets(settings)
    elif not ((settings.jwt_secret or settings.jwks_url) and settings.encryption_key):
        print(
            "A2AC_ENCRYPTION_KEY and A2AC_JWT_SECRET (or A2AC_JWKS_URL) must be set",
            file=sys.stderr,
        )
        return 2
    try:
        if settings.jwt_secret or not settings.jwks_url:
            check_jwt_secret(settings.jwt_secret)
        check_jwks_url(settings.jwks_url)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        check_port(settings.host, settings.port)
    except StartupError as exc:
        print(exc, file=sys.stderr)
        return 1
    with database(settings) as ready:
        assert ready.database_url
        if not _database_answers(ready.database_url):
            return 1
        if ready.listen and not _listen_answers(ready):
            return 1
        asyncio.run(migrate_url(ready.database_url, ready.db_statement_cache))
        url = f"http://{ready.host}:{ready.port}"
        print(f"a2a-continue serving on {url}", flush=True)
        if embedded:
            token = mint_token(
                ready.jwt_secret,
                ADMIN,
                ["*"],
                is_admin=True,
                ttl_s=86400,
                issuer=ready.jwt_issuer,
                audience=ready.jwt_audience,
            )
            path = shown_path(write_admin_token(ready.data_dir, token))
            print(f"admin token (24 h, {ADMIN}) written to {path}", flush=True)
            print(f"try: TOKEN=$(cat {path})", flush=True)
            print(f'     curl -H "Authorization: Bearer $TOKEN" {url}/v1/a2a/agents', flush=True)
        # uvicorn re-raises the signal that stopped it; make SIGTERM an exit that unwinds,
        # so the embedded database is stopped on the way out.
        signal.signal(signal.SIGTERM, _exit)
        with suppress(KeyboardInterrupt):
            serving.run(ready)
    return 0


def _migrated(ready: Settings) -> bool:
    """Check the database answers and bring its schema up to date; print why not."""
    assert ready.database_url
    if not _database_answers(ready.database_url):
        return False
    asyncio.run(migrate_url(ready.database_url, ready.db_statement_cache))
    return True


def _database_answers(database_url: str) -> bool:
    """Check the database answers before anything uses it; print why not."""
    try:
        asyncio.run(check_database(database_url))
    except StartupError as exc:
        print(exc, file=sys.stderr)
        return False
    return True


def _listen_answers(settings: Settings) -> bool:
    """Check the LISTEN connection reaches PostgreSQL itself; print why not."""
    assert settings.database_url
    listen_url = settings.listen_database_url or settings.database_url
    try:
        asyncio.run(check_listen(listen_url, settings.database_url))
    except StartupError as exc:
        print(exc, file=sys.stderr)
        return False
    return True


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def migrate(settings: Settings) -> int:
    """Apply pending migrations and list them."""
    with database(settings) as ready:
        assert ready.database_url
        if not _database_answers(ready.database_url):
            return 1
        applied = asyncio.run(migrate_url(ready.database_url, ready.db_statement_cache))
    print("applied: " + (", ".join(applied) or "nothing, the schema is current"))
    return 0


def token(settings: Settings, args: argparse.Namespace) -> int:
    """Print a token signed with the gateway's secret; refuse when there is none to find."""
    stored = None if settings.jwt_secret else load_secrets(settings.data_dir)
    secret = settings.jwt_secret or (stored or {}).get("jwt_secret")
    if not secret:
        # A secret made up here would sign tokens that no gateway accepts.
        found = "does not exist" if stored is None else "holds no jwt_secret"
        print(
            f"no JWT secret to sign with: A2AC_JWT_SECRET is not set and"
            f" {secrets_path(settings.data_dir)} {found} (`serve` creates it on first start)",
            file=sys.stderr,
        )
        return 2
    perms = args.perm or ["*"]
    print(
        mint_token(
            secret,
            args.sub,
            perms,
            args.team or [],
            args.admin,
            args.ttl,
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
        )
    )
    return 0


def console(settings: Settings, url: str | None = None) -> int:
    """Print a one-time link that opens the console signed in as the embedded set-up's admin;
    warn when no gateway answers where the link points."""
    with database(settings) as ready:
        if not _migrated(ready):
            return 1
        code = asyncio.run(_new_code(ready))
    base = gateway_url(settings, url)
    # The code rides in the fragment, which browsers never send to a server.
    print(f"{base}/console#code={code}", flush=True)
    minutes = max(1, round(settings.console_code_ttl_s / 60))
    print(
        f"one-time sign-in link for {ADMIN} (works once, within {minutes} min;"
        f" the console's token lasts {round(settings.console_token_ttl_s / 60)} min)",
        file=sys.stderr,
    )
    if not asyncio.run(answers(base)):
        print(
            f"warning: no gateway answers at {base} (GET /healthz): start `a2a-continue serve`,"
            " or name the gateway with --url (or --host/--port, A2AC_PUBLIC_URL,"
            " A2AC_HOST/A2AC_PORT)",
            file=sys.stderr,
        )
    return 0


def gateway_url(settings: Settings, url: str | None = None) -> str:
    """Where the gateway is: ``url``, else ``A2AC_PUBLIC_URL``, else where ``serve`` listens."""
    given = url or settings.public_url
    return given.rstrip("/") if given else listen_url(settings)


def listen_url(settings: Settings) -> str:
    """The URL of ``A2AC_HOST``:``A2AC_PORT`` (an address meaning every interface is reached
    through loopback)."""
    host = LOOPBACK.get(settings.host, settings.host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    return f"http://{host}:{settings.port}"


LOOPBACK = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}
PROBE_S = 3.0


async def answers(base: str) -> bool:
    """Whether a gateway answers ``GET /healthz`` at ``base``."""
    timeout = aiohttp.ClientTimeout(total=PROBE_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(base + "/healthz", allow_redirects=False) as answer,
        ):
            return answer.status == 200 and await answer.json() == {"status": "ok"}
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False


async def _new_code(settings: Settings) -> str:
    assert settings.database_url
    conn = await asyncpg.connect(
        settings.database_url, statement_cache_size=settings.db_statement_cache
    )
    try:
        return await console_codes.create_code(conn, ADMIN, True, settings.console_code_ttl_s)
    finally:
        await conn.close()


def prune(settings: Settings, args: argparse.Namespace) -> int:
    """Delete (or, dry, count) the terminal tasks completed more than DAYS ago."""
    with database(settings) as ready:
        if not _migrated(ready):
            return 1
        pruned = asyncio.run(_prune(ready, args.older_than, args.dry_run))
    what = f"terminal tasks completed over {args.older_than:g} days ago"
    if not pruned.ran:
        print("another process is pruning now; nothing deleted", file=sys.stderr)
        return 1
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {pruned.tasks} {what}, with {pruned.events} events")
    return 0


async def _prune(settings: Settings, days: float, dry_run: bool) -> Pruned:
    assert settings.database_url
    conn = await asyncpg.connect(
        settings.database_url, statement_cache_size=settings.db_statement_cache
    )
    try:
        if dry_run:
            return await retention.due(conn, days)
        return await retention.prune(conn, days, batch=settings.retention_batch)
    finally:
        await conn.close()
