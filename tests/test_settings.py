"""Settings from the environment: defaults, parsing, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2a_continue.settings import MIB, Settings, SettingsError, load_settings


def test_defaults_when_nothing_is_set() -> None:
    settings = load_settings({})
    assert settings == Settings()
    assert settings.database_url is None
    assert settings.data_dir == Path("~/.local/share/a2a-continue").expanduser()
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.agent_timeout_s == 30.0
    assert settings.max_body_bytes == MIB == 1024 * 1024
    assert (settings.jwt_secret, settings.encryption_key) == ("", "")


def test_empty_values_mean_the_default() -> None:
    env = {"A2AC_DATABASE_URL": "", "A2AC_HOST": "", "A2AC_PORT": "", "A2AC_DATA_DIR": ""}
    assert load_settings(env) == Settings()


def test_every_setting_is_read_from_its_variable() -> None:
    env = {
        "A2AC_DATABASE_URL": "postgresql://u@db:5432/gw",
        "A2AC_DATA_DIR": "/var/lib/a2a",
        "A2AC_HOST": "0.0.0.0",
        "A2AC_PORT": "9000",
        "A2AC_JWT_SECRET": "jwt-secret",
        "A2AC_ENCRYPTION_KEY": "key",
        "A2AC_AGENT_TIMEOUT_S": "2.5",
        "A2AC_MAX_BODY_BYTES": "2048",
        "A2AC_MAX_AGENT_RESPONSE_BYTES": "4096",
        "A2AC_CLAIM_MARGIN_S": "0.5",
        "A2AC_POOL_SIZE": "3",
    }
    assert load_settings(env) == Settings(
        database_url="postgresql://u@db:5432/gw",
        data_dir=Path("/var/lib/a2a"),
        host="0.0.0.0",
        port=9000,
        jwt_secret="jwt-secret",
        encryption_key="key",
        agent_timeout_s=2.5,
        max_body_bytes=2048,
        max_agent_response_bytes=4096,
        claim_margin_s=0.5,
        pool_size=3,
    )


def test_data_dir_expands_the_home_directory() -> None:
    assert load_settings({"A2AC_DATA_DIR": "~/gw"}).data_dir == Path.home() / "gw"


def test_settings_read_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("A2AC_PORT", "8181")
    assert load_settings().port == 8181


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("A2AC_PORT", "http"),
        ("A2AC_PORT", "0"),
        ("A2AC_PORT", "-1"),
        ("A2AC_PORT", "80.5"),
        ("A2AC_PORT", "70000"),
        ("A2AC_PORT", "inf"),
        ("A2AC_PORT", "nan"),
        ("A2AC_AGENT_TIMEOUT_S", "soon"),
        ("A2AC_AGENT_TIMEOUT_S", "0"),
        ("A2AC_AGENT_TIMEOUT_S", "-3"),
        ("A2AC_AGENT_TIMEOUT_S", "nan"),
        ("A2AC_AGENT_TIMEOUT_S", "inf"),
        ("A2AC_MAX_BODY_BYTES", "1MiB"),
        ("A2AC_MAX_BODY_BYTES", "0.5"),
        ("A2AC_POOL_SIZE", "0"),
        ("A2AC_CLAIM_MARGIN_S", "x"),
    ],
)
def test_bad_number_is_a_settings_error_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({name: value})
