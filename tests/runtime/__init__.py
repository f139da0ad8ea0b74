"""Tests of the process resources (a2a_continue.runtime)."""
