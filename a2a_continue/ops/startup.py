"""What `serve` checks before it starts, each refusal one line; where the admin token goes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg

from a2a_continue.runtime.db import NotDirect, check_direct

DATABASE_CONNECT_TIMEOUT_S = 10.0
ADMIN_TOKEN_FILE = "admin-token"


class StartupError(Exception):
    """A reason not to start, said in one line."""


def check_port(host: str, port: int) -> None:
    """Refuse to start when nothing can listen on host:port (in use, or no such address)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As uvicorn does, so a port in TIME_WAIT counts as free and a listening one does not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise StartupError(f"cannot listen on {host}:{port}: {reason}") from None


def database_name(url: str) -> str:
    """``host:port/database`` of a PostgreSQL URL, without user or password."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    socket_dir = parse_qs(parts.query).get("host", [""])[0]
    host = parts.hostname or socket_dir or "localhost"
    where = f"{host}:{port or 5432}"
    return where + (parts.path if parts.path not in ("", "/") else "")


async def check_database(url: str) -> None:
    """Connect once to ``url``; refuse to start, in one line, when that fails."""
    where = database_name(url)
    try:
        conn = await asyncpg.connect(url, timeout=DATABASE_CONNECT_TIMEOUT_S)
    except TimeoutError:
        raise StartupError(
            f"cannot reach the database at {where}: no answer within"
            f" {DATABASE_CONNECT_TIMEOUT_S:g} s"
        ) from None
    except ConnectionRefusedError:
        raise StartupError(
            f"cannot reach the database at {where}: connection refused (is PostgreSQL running?)"
        ) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StartupError(f"cannot reach the database at {where}: {_one_line(reason)}") from None
    except asyncpg.PostgresError as exc:
        raise StartupError(f"cannot use the database at {where}: {_one_line(str(exc))}") from None
    except (ValueError, asyncpg.InterfaceError) as exc:
        raise StartupError(f"the database URL is not usable: {_one_line(str(exc))}") from None
    await conn.close()


async def check_listen(listen_url: str, database_url: str) -> None:
    """Refuse to start when the LISTEN connection would not reach PostgreSQL itself (a pooler
    between, see ``check_direct``) or reaches another database than the statements."""
    where = database_name(listen_url)
    try:
        conn = await asyncpg.connect(listen_url, timeout=DATABASE_CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        reason = _one_line(str(exc)) or type(exc).__name__
        raise StartupError(f"cannot open the LISTEN connection to {where}: {reason}") from None
    try:
        async with asyncio.timeout(DATABASE_CONNECT_TIMEOUT_S):
            try:
                await check_direct(conn)
            except NotDirect as exc:
                raise StartupError(
                    f"LISTEN cannot go through {where}: {exc}; set A2AC_LISTEN_DATABASE_URL"
                    " to a URL straight to PostgreSQL"
                ) from None
            listening = await conn.fetchval("SELECT current_database()")
        if listen_url != database_url:
            other = await asyncpg.connect(
                database_url, timeout=DATABASE_CONNECT_TIMEOUT_S, statement_cache_size=0
            )
            try:
                async with asyncio.timeout(DATABASE_CONNECT_TIMEOUT_S):
                    writing = await other.fetchval("SELECT current_database()")
            finally:
                await other.close()
            if listening != writing:
                raise StartupError(
                    f"A2AC_LISTEN_DATABASE_URL names database {listening!r} and"
                    f" A2AC_DATABASE_URL {writing!r}: notifications would never arrive"
                )
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        reason = _one_line(str(exc)) or type(exc).__name__
        raise StartupError(f"cannot check the LISTEN connection to {where}: {reason}") from None
    finally:
        conn.terminate()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def write_admin_token(data_dir: Path, token: str) -> Path:
    """Write ``token`` to a file only its owner can read, in ``data_dir``; return its path."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / ADMIN_TOKEN_FILE
    partial = data_dir / f".{ADMIN_TOKEN_FILE}.{os.getpid()}"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(token + "\n")
        os.chmod(partial, 0o600)
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return path


def shown_path(path: Path) -> str:
    """``path`` as a user would type it: ``~/…`` when it is under the home directory."""
    try:
        return "~/" + str(path.resolve().relative_to(Path.home().resolve()))
    except ValueError:
        return str(path)
