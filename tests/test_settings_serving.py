"""The serving and logging settings: defaults and refusals."""

from __future__ import annotations

import pytest

from a2a_continue.settings import SettingsError, load_settings


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
