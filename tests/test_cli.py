"""The command line: token, migrate, and serve on a shared embedded database."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import jwt
import msgspec
import pytest

from a2a_continue import cli
from a2a_continue.http.tokens import TokenVerifier
from a2a_continue.runtime.secrets import load_or_create_secrets
from a2a_continue.settings import Settings, load_settings
from tests.support.database import (
    create_database,
    direct_url,
    drop_database,
    insert_agent,
    topology_env,
    with_database,
)
from tests.support.ports import free_port
from tests.support.processes import clean_env, ready, run_cli, start_serve, wait_ready


def postgres_running(data_dir: Path) -> bool:
    pid_file = data_dir / "pgdata" / "postmaster.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().split()[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes of `serve` started by a test; all stopped at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_token_prints_a_signed_token_with_the_given_claims() -> None:
    secret = "cli-secret-" + "y" * 32
    done = run_cli(
        "token", "--sub", "ann@example.com", "--perm", "a2a.read", "--perm", "a2a.invoke",
        "--team", "blue", "--admin", "--ttl", "120",
        env=clean_env(A2AC_JWT_SECRET=secret),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    claims = jwt.decode(done.stdout.strip(), secret, algorithms=["HS256"])
    assert claims["sub"] == "ann@example.com"
    assert claims["permissions"] == ["a2a.read", "a2a.invoke"]
    assert claims["teams"] == ["blue"]
    assert claims["is_admin"] is True
    assert 100 <= claims["exp"] - time.time() <= 121


def test_migrate_applies_pending_migrations_once(server_url: str) -> None:
    name = f"a2ac_cli_{os.getpid()}"
    asyncio.run(create_database(server_url, name))
    try:
        url = with_database(server_url, name)
        env = clean_env(A2AC_DATABASE_URL=url, **topology_env(url))
        first, second = run_cli("migrate", env=env), run_cli("migrate", env=env)
    finally:
        asyncio.run(drop_database(server_url, name))
    assert first.returncode == 0, first.stderr
    assert "applied: 0001_init" in first.stdout
    assert second.returncode == 0, second.stderr
    assert "nothing, the schema is current" in second.stdout


def test_serve_on_a_given_database_refuses_to_start_without_secrets() -> None:
    done = run_cli("serve", env=clean_env(A2AC_DATABASE_URL="postgresql://x@127.0.0.1:1/x"))
    assert done.returncode == 2
    assert "A2AC_ENCRYPTION_KEY and A2AC_JWT_SECRET (or A2AC_JWKS_URL) must be set" in done.stderr


def test_serve_refuses_a_malformed_encryption_key() -> None:
    done = run_cli("serve", env=clean_env(A2AC_ENCRYPTION_KEY="not-a-key"))
    assert done.returncode == 2
    assert "A2AC_ENCRYPTION_KEY" in done.stderr


def test_two_serves_share_one_embedded_database_and_the_last_stops_it(
    tmp_path: Path, serve: list[subprocess.Popen[bytes]]
) -> None:
    data_dir = tmp_path / "data"
    env = clean_env(A2AC_DATA_DIR=str(data_dir))
    ports: list[int] = []
    for n in range(2):
        # Each port is picked right before its serve binds it, so nothing else takes it first.
        ports.append(free_port())
        with (tmp_path / f"serve-{n}.log").open("wb") as log:
            process = start_serve(env, ports[-1], stdout=log, stderr=subprocess.STDOUT)
        serve.append(process)
        try:
            wait_ready(ports[-1], process)
        except AssertionError:
            raise AssertionError((tmp_path / f"serve-{n}.log").read_text()) from None
    secrets = json.loads((data_dir / "secrets.json").read_text())
    assert set(secrets) == {"jwt_secret", "encryption_key"}
    assert (data_dir / "secrets.json").stat().st_mode & 0o777 == 0o600

    serve[0].send_signal(signal.SIGTERM)
    assert serve[0].wait(timeout=30) == 0
    assert ready(ports[1]), "the second serve lost its database when the first stopped"
    assert postgres_running(data_dir)

    serve[1].send_signal(signal.SIGTERM)
    assert serve[1].wait(timeout=30) == 0
    assert not postgres_running(data_dir)


def test_token_signs_with_the_secret_serve_generated_in_the_data_dir(tmp_path: Path) -> None:
    secret = load_or_create_secrets(tmp_path)["jwt_secret"]  # as `serve` does on first start
    env = clean_env(A2AC_DATA_DIR=str(tmp_path))
    first = run_cli("token", "--sub", "a@example.com", env=env)
    second = run_cli("token", "--sub", "a@example.com", env=env)
    for done in (first, second):
        assert done.returncode == 0, done.stderr
        jwt.decode(done.stdout.strip(), secret, algorithms=["HS256"])


def test_serve_refuses_a_jwt_secret_shorter_than_32_bytes_in_one_line(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert settings.database_url
    monkeypatch.setenv("A2AC_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("A2AC_JWT_SECRET", "too-short")
    monkeypatch.setenv("A2AC_ENCRYPTION_KEY", settings.encryption_key)
    assert cli.main(["serve", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "A2AC_JWT_SECRET must be at least 32 bytes" in err


def test_serve_refuses_a_jwks_url_at_a_refused_address_in_one_line(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert settings.database_url
    monkeypatch.setenv("A2AC_DATABASE_URL", settings.database_url)
    monkeypatch.delenv("A2AC_JWT_SECRET", raising=False)
    monkeypatch.setenv("A2AC_JWKS_URL", "http://[64:ff9b::a9fe:a9fe]/jwks.json")
    monkeypatch.setenv("A2AC_ENCRYPTION_KEY", settings.encryption_key)
    assert cli.main(["serve", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "A2AC_JWKS_URL is at a refused address" in err and "169.254.169.254" in err


def test_token_without_a_secret_refuses_and_creates_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    done = run_cli("token", "--sub", "a@example.com", env=clean_env(A2AC_DATA_DIR=str(data_dir)))
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "A2AC_JWT_SECRET" in line
    assert str(data_dir / "secrets.json") in line
    assert not data_dir.exists()


def test_console_prints_a_one_time_link_whose_code_is_stored_hashed(database_url: str) -> None:
    env = clean_env(A2AC_DATABASE_URL=database_url, A2AC_PORT="8123", **topology_env(database_url))
    done = run_cli("console", env=env)
    assert done.returncode == 0, done.stderr
    link = done.stdout.strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:8123/console#code=[A-Za-z0-9_-]{40,}", link)
    code = link.split("#code=", 1)[1]
    stored = asyncio.run(_stored_codes(database_url))
    assert hashlib.sha256(code.encode()).digest() in stored
    assert "works once" in done.stderr


async def _stored_codes(database_url: str) -> list[bytes]:
    conn = await asyncpg.connect(direct_url(database_url))
    try:
        return [row[0] for row in await conn.fetch("SELECT code_sha256 FROM a2a_console_codes")]
    finally:
        await conn.close()


async def test_prune_dry_run_counts_and_prune_deletes_old_terminal_tasks(
    db: asyncpg.Connection, database_url: str
) -> None:
    agent = await insert_agent(db)
    for task_id, days in (("old", 40), ("new", 1)):
        await db.execute(
            "INSERT INTO a2a_tasks (agent_id, task_id, state, owner, completed_at, last_seq)"
            " VALUES ($1, $2, 'completed', 'alice@example.com',"
            " now() - make_interval(days => $3), 0)",
            agent,
            task_id,
            days,
        )
    env = clean_env(A2AC_DATABASE_URL=database_url, **topology_env(database_url))
    dry = await asyncio.to_thread(run_cli, "prune", "--older-than", "30", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "would delete 1 terminal tasks completed over 30 days ago" in dry.stdout
    assert await db.fetchval("SELECT count(*) FROM a2a_tasks") == 2
    done = await asyncio.to_thread(run_cli, "prune", "--older-than", "30", env=env)
    assert done.returncode == 0, done.stderr
    assert "deleted 1 terminal tasks" in done.stdout
    assert await db.fetchval("SELECT array_agg(task_id) FROM a2a_tasks") == ["new"]


def test_prune_refuses_a_negative_age() -> None:
    bad = run_cli("prune", "--older-than", "-1", env=clean_env())
    assert bad.returncode == 2
    assert "must be a number of days >= 0" in bad.stderr


ISSUER_ENV = {"A2AC_JWT_ISSUER": "https://idp.example.com", "A2AC_JWT_AUDIENCE": "a2a-gateway"}


def test_token_carries_the_issuer_and_audience_the_gateway_checks() -> None:
    env = clean_env(A2AC_JWT_SECRET="cli-secret-" + "y" * 32, **ISSUER_ENV)
    done = run_cli("token", "--sub", "ann@example.com", env=env)
    assert done.returncode == 0, done.stderr
    verifier = TokenVerifier(load_settings(env))
    caller = asyncio.run(verifier.caller(done.stdout.strip()))
    assert caller.sub == "ann@example.com"


def test_token_signs_with_the_secret_of_the_data_dir_given_with_data_dir(tmp_path: Path) -> None:
    secret = load_or_create_secrets(tmp_path / "other")["jwt_secret"]
    env = clean_env(A2AC_DATA_DIR=str(tmp_path / "unused"))
    done = run_cli(
        "token", "--sub", "a@example.com", "--data-dir", str(tmp_path / "other"), env=env
    )
    assert done.returncode == 0, done.stderr
    jwt.decode(done.stdout.strip(), secret, algorithms=["HS256"])
    assert not (tmp_path / "unused").exists()


def test_the_admin_token_serve_writes_is_accepted_when_issuer_and_audience_are_checked(
    tmp_path: Path, serve: list[subprocess.Popen[bytes]]
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        process = start_serve(
            clean_env(A2AC_DATA_DIR=str(data_dir), **ISSUER_ENV),
            port,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    serve.append(process)
    try:
        wait_ready(port, process)
    except AssertionError:
        raise AssertionError((tmp_path / "serve.log").read_text()) from None
    token = (data_dir / "admin-token").read_text().strip()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/a2a/agents", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0


def link_of(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    link = done.stdout.strip()
    assert re.fullmatch(r"\S+/console#code=[A-Za-z0-9_-]{40,}", link), link
    return link.split("/console#", 1)[0]


def test_console_links_to_the_gateway_given_with_url(database_url: str) -> None:
    env = clean_env(A2AC_DATABASE_URL=database_url, A2AC_PORT="8123", **topology_env(database_url))
    given = f"http://127.0.0.1:{free_port()}/gateway/"
    done = run_cli("console", "--url", given, env=env)
    assert link_of(done) == given.rstrip("/")


def test_console_follows_the_port_and_host_as_serve_does(database_url: str) -> None:
    env = clean_env(A2AC_DATABASE_URL=database_url, **topology_env(database_url))
    port = str(free_port())
    from_setting = run_cli("console", env={**env, "A2AC_PORT": port, "A2AC_HOST": "0.0.0.0"})
    assert link_of(from_setting) == f"http://127.0.0.1:{port}"  # every interface: loopback
    proxy = f"http://127.0.0.1:{free_port()}/gw"  # loopback: the command probes it
    public = {**env, "A2AC_PORT": port, "A2AC_PUBLIC_URL": proxy + "/"}
    assert link_of(run_cli("console", env=public)) == proxy
    other = str(free_port())
    from_option = run_cli("console", "--port", other, "--host", "::1", env=public)
    assert link_of(from_option) == f"http://[::1]:{other}"  # the options name the gateway


def test_console_warns_when_no_gateway_answers_where_its_link_points(database_url: str) -> None:
    env = clean_env(A2AC_DATABASE_URL=database_url, **topology_env(database_url))
    port = free_port()
    done = run_cli("console", "--port", str(port), env=env)
    assert done.returncode == 0
    assert f"no gateway answers at http://127.0.0.1:{port}" in done.stderr
    assert "--url" in done.stderr


async def test_console_says_nothing_more_when_the_gateway_answers_at_its_link(
    database_url: str, gateway_url: str
) -> None:
    env = clean_env(A2AC_DATABASE_URL=database_url, **topology_env(database_url))
    done = await asyncio.to_thread(run_cli, "console", "--url", gateway_url, env=env)
    assert link_of(done) == gateway_url
    assert "warning" not in done.stderr


def subcommands() -> dict[str, argparse.ArgumentParser]:
    # argparse has no public way to list a parser's subcommands or options: its _actions.
    (found,) = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found.choices)


def test_every_subcommand_has_help_on_each_option_and_says_the_settings_it_reads() -> None:
    known = {"A2AC_" + field.name.upper() for field in msgspec.structs.fields(Settings)}
    commands = subcommands()
    assert set(commands) == {
        "serve", "migrate", "token", "console", "prune", "demo", "sample-agent"
    }  # fmt: skip
    for name, command in commands.items():
        does, _, reads = (command.description or "").partition("Reads: ")
        assert does.strip() and reads.strip(), name
        named = set(re.findall(r"A2AC_[A-Z0-9_]+", reads))
        assert named <= known, (name, named - known)
        assert named or reads.startswith("no setting"), name
        for action in command._actions:
            assert action.help, (name, action.option_strings)
    assert {"A2AC_PUBLIC_URL", "A2AC_HOST", "A2AC_PORT"} <= set(
        re.findall(r"A2AC_[A-Z0-9_]+", commands["console"].description or "")
    )


@pytest.mark.parametrize("command", ["serve", "migrate", "token", "console", "prune", "demo"])
def test_each_subcommands_help_is_printed_with_its_description(command: str) -> None:
    done = run_cli(command, "--help", env=clean_env())
    assert done.returncode == 0
    assert "Reads: " in done.stdout
    assert len(done.stdout.splitlines()) > 5
