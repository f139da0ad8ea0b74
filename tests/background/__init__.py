"""Tests of the background work (a2a_continue.background)."""
