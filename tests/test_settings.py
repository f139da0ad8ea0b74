"""Settings from the environment: defaults, parsing, refusals; those of hardening, streams,
serving and logging."""

from __future__ import annotations

import ipaddress
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


# ---- the hardening settings: read from the environment, refused when unusable ------------


def test_hardening_settings_have_their_defaults() -> None:
    settings = load_settings({})
    assert (settings.db_timeout_s, settings.agent_concurrency, settings.body_timeout_s) == (
        5,
        20,
        10,
    )
    assert (settings.agent_networks, settings.claim_sweep_s) == ((), 30)
    assert settings == Settings()


def test_hardening_settings_are_read_from_the_environment() -> None:
    settings = load_settings(
        {
            "A2AC_DB_TIMEOUT_S": "2.5",
            "A2AC_AGENT_CONCURRENCY": "3",
            "A2AC_AGENT_NETWORKS": "10.0.0.0/8, ::1",
            "A2AC_BODY_TIMEOUT_S": "4",
            "A2AC_CLAIM_SWEEP_S": "7",
        }
    )
    assert settings.db_timeout_s == 2.5
    assert settings.agent_concurrency == 3
    assert settings.agent_networks == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
    )
    assert (settings.body_timeout_s, settings.claim_sweep_s) == (4, 7)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("A2AC_AGENT_NETWORKS", "10.0.0.0/33"),
        ("A2AC_AGENT_NETWORKS", "localhost"),
        ("A2AC_DB_TIMEOUT_S", "0"),
        ("A2AC_AGENT_CONCURRENCY", "1.5"),
        ("A2AC_BODY_TIMEOUT_S", "-1"),
        ("A2AC_CLAIM_SWEEP_S", "inf"),
    ],
)
def test_unusable_hardening_settings_are_refused(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({name: value})


def test_the_request_head_bound_defaults_to_64_kib_and_is_read_from_its_variable() -> None:
    assert load_settings({}).max_header_bytes == 64 * 1024
    assert load_settings({"A2AC_MAX_HEADER_BYTES": "8192"}).max_header_bytes == 8192


@pytest.mark.parametrize("value", ["1023", "0", "64k", "1.5"])
def test_a_request_head_bound_under_1_kib_or_not_a_whole_number_is_refused(value: str) -> None:
    with pytest.raises(SettingsError, match="A2AC_MAX_HEADER_BYTES"):
        load_settings({"A2AC_MAX_HEADER_BYTES": value})


# ---- settings of streams and the live event stream ---------------------------------------


def test_stream_settings_default_to_the_documented_values() -> None:
    settings = load_settings({})
    assert (settings.stream_max_s, settings.max_streams) == (3600.0, 10_000)
    assert (settings.keepalive_s, settings.stream_poll_s, settings.listen) == (15.0, 3.0, True)


def test_stream_settings_are_read_from_their_variables() -> None:
    env = {
        "A2AC_STREAM_MAX_S": "60",
        "A2AC_MAX_STREAMS": "5",
        "A2AC_KEEPALIVE_S": "0.5",
        "A2AC_STREAM_POLL_S": "1.5",
        "A2AC_LISTEN": "false",
    }
    assert load_settings(env) == Settings(
        stream_max_s=60, max_streams=5, keepalive_s=0.5, stream_poll_s=1.5, listen=False
    )


@pytest.mark.parametrize("raw", ["1", "true", "YES", "on"])
def test_listen_accepts_the_usual_spellings_of_true(raw: str) -> None:
    assert load_settings({"A2AC_LISTEN": raw}).listen is True


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("A2AC_LISTEN", "maybe"),
        ("A2AC_MAX_STREAMS", "2.5"),
        ("A2AC_MAX_STREAMS", "0"),
        ("A2AC_KEEPALIVE_S", "-1"),
        ("A2AC_STREAM_POLL_S", "nan"),
        ("A2AC_STREAM_MAX_S", "soon"),
    ],
)
def test_unusable_stream_settings_are_refused_by_name(name: str, raw: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({name: raw})


# ---- the serving and logging settings: defaults and refusals -----------------------------


def test_serving_and_logging_defaults() -> None:
    settings = load_settings({})
    assert (settings.workers, settings.drain_s) == (1, 30.0)
    assert (settings.log_format, settings.log_level) == ("text", "info")


def test_serving_and_logging_settings_are_read() -> None:
    settings = load_settings(
        {
            "A2AC_WORKERS": "4",
            "A2AC_DRAIN_S": "2.5",
            "A2AC_LOG_FORMAT": "JSON",
            "A2AC_LOG_LEVEL": "Warning",
        }
    )
    assert (settings.workers, settings.drain_s) == (4, 2.5)
    assert (settings.log_format, settings.log_level) == ("json", "warning")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("A2AC_WORKERS", "0"),
        ("A2AC_WORKERS", "1.5"),
        ("A2AC_WORKERS", "1000"),
        ("A2AC_DRAIN_S", "-1"),
        ("A2AC_LOG_FORMAT", "xml"),
        ("A2AC_LOG_LEVEL", "loud"),
    ],
)
def test_a_bad_serving_or_logging_setting_is_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({name: value})


def test_topology_settings_default_to_a_statement_cache_and_no_listen_url() -> None:
    settings = load_settings({})
    assert (settings.db_statement_cache, settings.listen_database_url) == (100, None)


def test_topology_settings_are_read_from_their_variables() -> None:
    settings = load_settings(
        {
            "A2AC_DB_STATEMENT_CACHE": "0",
            "A2AC_LISTEN_DATABASE_URL": "postgresql://gw@postgres:5432/gw",
        }
    )
    assert settings.db_statement_cache == 0
    assert settings.listen_database_url == "postgresql://gw@postgres:5432/gw"


@pytest.mark.parametrize("raw", ["-1", "ten", "2.5"])
def test_a_statement_cache_that_is_not_a_whole_number_is_refused(raw: str) -> None:
    with pytest.raises(SettingsError, match="A2AC_DB_STATEMENT_CACHE"):
        load_settings({"A2AC_DB_STATEMENT_CACHE": raw})


def test_push_settings_default_to_the_documented_values() -> None:
    settings = load_settings({})
    assert settings.push_networks == ()
    assert (settings.push_max_attempts, settings.push_concurrency) == (8, 50)
    assert (settings.push_timeout_s, settings.push_lease_s, settings.push_poll_s) == (10, 60, 5)
    assert (settings.push_retry_base_s, settings.push_retry_max_s) == (1.0, 300.0)
    assert (settings.push_signing_key, settings.push_dispatch) == ("", True)


def test_push_settings_are_read_from_the_environment() -> None:
    settings = load_settings(
        {
            "A2AC_PUSH_NETWORKS": "10.0.0.0/8",
            "A2AC_PUSH_MAX_ATTEMPTS": "3",
            "A2AC_PUSH_CONCURRENCY": "7",
            "A2AC_PUSH_TIMEOUT_S": "2.5",
            "A2AC_PUSH_RETRY_BASE_S": "0.5",
            "A2AC_PUSH_RETRY_MAX_S": "60",
            "A2AC_PUSH_LEASE_S": "30",
            "A2AC_PUSH_POLL_S": "1",
            "A2AC_PUSH_SIGNING_KEY": "pem",
            "A2AC_PUSH_DISPATCH": "false",
        }
    )
    assert settings.push_networks == (ipaddress.ip_network("10.0.0.0/8"),)
    assert (settings.push_max_attempts, settings.push_concurrency) == (3, 7)
    assert (settings.push_timeout_s, settings.push_lease_s, settings.push_poll_s) == (2.5, 30, 1)
    assert (settings.push_retry_base_s, settings.push_retry_max_s) == (0.5, 60.0)
    assert (settings.push_signing_key, settings.push_dispatch) == ("pem", False)


def test_a_push_attempt_count_that_is_not_a_whole_number_is_refused() -> None:
    with pytest.raises(SettingsError, match="A2AC_PUSH_MAX_ATTEMPTS"):
        load_settings({"A2AC_PUSH_MAX_ATTEMPTS": "2.5"})


def test_retention_is_off_unless_a2ac_retention_days_is_set() -> None:
    assert load_settings({}).retention_days is None
    settings = load_settings({"A2AC_RETENTION_DAYS": "30", "A2AC_RETENTION_BATCH": "100"})
    assert (settings.retention_days, settings.retention_batch) == (30.0, 100)
    with pytest.raises(SettingsError, match="A2AC_RETENTION_DAYS"):
        load_settings({"A2AC_RETENTION_DAYS": "0"})


def test_card_signatures_are_recorded_by_default_and_required_when_set() -> None:
    assert load_settings({}).card_signatures == "record"
    env = {"A2AC_CARD_SIGNATURES": "Require", "A2AC_CARD_SIGNING_KEY": "pem"}
    read = load_settings(env)
    assert (read.card_signatures, read.card_signing_key) == ("require", "pem")


def test_an_unknown_card_signatures_mode_is_refused_by_name() -> None:
    with pytest.raises(SettingsError, match="A2AC_CARD_SIGNATURES"):
        load_settings({"A2AC_CARD_SIGNATURES": "verify"})
