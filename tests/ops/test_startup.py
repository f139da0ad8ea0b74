"""Starting the gateway as a newcomer does: one clear line for each refusal, before any token;
the admin token in a 0600 file; help without markup; no token that is born expired."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2a_continue.ops.startup import database_name, write_admin_token
from tests.support.database import direct_url, with_database
from tests.support.db_faults import faulty_database
from tests.support.ports import busy_port, free_port
from tests.support.processes import CLI, clean_env, run_cli, start_serve, wait_ready

SECRET = "startup-test-secret-" + "s" * 32
KEY = base64.b64encode(os.urandom(32)).decode()


def database_env(url: str, **extra: str) -> dict[str, str]:
    return clean_env(
        A2AC_DATABASE_URL=url, A2AC_JWT_SECRET=SECRET, A2AC_ENCRYPTION_KEY=KEY, **extra
    )


@pytest.fixture
def busy() -> Iterator[int]:
    """A local port something listens on during the test."""
    with busy_port() as port:
        yield port


def dead_port() -> int:
    return free_port()


def test_serve_on_a_busy_port_says_so_in_one_line_before_any_token(
    tmp_path: Path, busy: int
) -> None:
    env = clean_env(A2AC_DATA_DIR=str(tmp_path))
    done = run_cli("serve", "--port", str(busy), env=env)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"cannot listen on 127.0.0.1:{busy}: Address already in use"
    ]
    assert not (tmp_path / "admin-token").exists()
    assert not (tmp_path / "pgdata").exists()  # refused before the embedded database started


def test_serve_with_an_unreachable_database_says_so_in_one_line(tmp_path: Path) -> None:
    port = dead_port()
    url = f"postgresql://gw:hunter2@127.0.0.1:{port}/gw"
    done = run_cli("serve", "--port", str(free_port()), env=database_env(url))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"cannot reach the database at 127.0.0.1:{port}/gw:"
        " connection refused (is PostgreSQL running?)"
    ]
    assert "hunter2" not in done.stderr


def test_serve_with_a_missing_database_says_so_in_one_line(server_url: str) -> None:
    url = with_database(server_url, "no_such_database_a2ac")
    done = run_cli("serve", "--port", str(free_port()), env=database_env(url))
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("cannot use the database at ")
    assert line.endswith('database "no_such_database_a2ac" does not exist')


def test_migrate_with_an_unreachable_database_says_so_in_one_line() -> None:
    port = dead_port()
    done = run_cli("migrate", env=database_env(f"postgresql://gw@127.0.0.1:{port}/gw"))
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"cannot reach the database at 127.0.0.1:{port}/gw")


def test_serve_with_a_database_url_that_is_not_one_says_so_in_one_line() -> None:
    done = run_cli("serve", env=database_env("postgresql://gw@127.0.0.1:notaport/gw"))
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("the database URL is not usable: ")


def test_embedded_serve_puts_the_admin_token_in_a_0600_file_not_in_its_output(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = clean_env(A2AC_DATA_DIR=str(tmp_path))
    with start_serve(
        env, port, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            wait_ready(port, process)
            token_file = tmp_path / "admin-token"
            token = token_file.read_text().strip()
            assert token_file.stat().st_mode & 0o777 == 0o600
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/a2a/agents",
                headers={"Authorization": f"Bearer {token}"},
            )
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 200
        finally:
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
    assert token not in out
    assert token not in err
    assert f"admin token (24 h, admin@localhost) written to {token_file}" in out
    assert f"try: TOKEN=$(cat {token_file})" in out


def test_the_admin_token_file_is_made_private_even_if_it_was_not(tmp_path: Path) -> None:
    (tmp_path / "admin-token").write_text("old")
    (tmp_path / "admin-token").chmod(0o644)
    path = write_admin_token(tmp_path, "new-token")
    assert path.read_text() == "new-token\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["admin-token"]


@pytest.mark.parametrize("ttl", ["-5", "0", "nan", "inf", "soon"])
def test_token_refuses_a_ttl_that_is_not_a_positive_number(ttl: str) -> None:
    done = run_cli("token", "--sub", "a@example.com", "--ttl", ttl, env=database_env("x"))
    assert done.returncode == 2
    assert done.stdout == ""
    assert "--ttl" in done.stderr


@pytest.mark.parametrize("command", [(), ("serve",), ("token",), ("migrate",), ("sample-agent",)])
def test_help_text_has_no_raw_markup(command: tuple[str, ...]) -> None:
    done = run_cli(*command, "--help", env=clean_env())
    assert done.returncode == 0
    assert "``" not in done.stdout


def test_serve_help_documents_host_and_port() -> None:
    done = run_cli("serve", "--help", env=clean_env())
    assert re.search(r"--host HOST +address to listen on", done.stdout)
    assert re.search(r"--port PORT +port to listen on", done.stdout)
    assert re.search(r"--workers WORKERS +processes serving the port", done.stdout)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("postgresql://u:secret@db.example:6543/gw", "db.example:6543/gw"),
        ("postgresql://u@db/gw", "db:5432/gw"),
        ("postgresql:///gw", "localhost:5432/gw"),
        ("postgresql://u@/gw?host=/run/pg", "/run/pg:5432/gw"),
    ],
)
def test_a_database_is_named_without_its_credentials(url: str, name: str) -> None:
    assert database_name(url) == name


async def serve_output(env: dict[str, str]) -> tuple[int, str, str]:
    """Run ``serve`` to its end inside the event loop (a proxy of the test serves meanwhile)."""
    process = await asyncio.create_subprocess_exec(
        *CLI,
        "serve",
        "--port",
        str(free_port()),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 120)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_serve_refuses_in_one_line_to_listen_through_a_connection_pooler(
    database_url: str,
) -> None:
    async with faulty_database(direct_url(database_url)) as pooler:
        pooler.announced_pid = 424242  # as PgBouncer announces a key of its own
        env = database_env(direct_url(database_url), A2AC_LISTEN_DATABASE_URL=pooler.url)
        code, out, err = await serve_output(env)
    assert code == 1
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("LISTEN cannot go through 127.0.0.1:")
    assert "a connection pooler is in between" in line
    assert line.endswith("set A2AC_LISTEN_DATABASE_URL to a URL straight to PostgreSQL")


async def test_serve_refuses_a_listen_url_on_another_database(database_url: str) -> None:
    elsewhere = with_database(direct_url(database_url), "postgres")
    env = database_env(direct_url(database_url), A2AC_LISTEN_DATABASE_URL=elsewhere)
    code, _out, err = await serve_output(env)
    assert code == 1
    (line,) = err.splitlines()
    assert line.startswith("A2AC_LISTEN_DATABASE_URL names database 'postgres'")
    assert line.endswith("notifications would never arrive")
