"""Tests of the use cases (a2a_continue.core)."""
