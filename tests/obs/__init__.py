"""Tests of logs, metrics and telemetry (a2a_continue.obs)."""
