"""Settings of streams and the live event stream."""

from __future__ import annotations

import pytest

from a2a_continue.settings import Settings, SettingsError, load_settings


def test_stream_settings_default_to_the_documented_values() -> None:
    settings = load_settings({})
    assert (settings.stream_max_s, settings.max_streams) == (3600.0, 1000)
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
