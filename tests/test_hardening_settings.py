"""The hardening settings: read from the environment, refused when unusable."""

from __future__ import annotations

import ipaddress

import pytest

from a2a_continue.settings import Settings, SettingsError, load_settings


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
