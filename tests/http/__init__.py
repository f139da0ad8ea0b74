"""Tests of the REST edge (a2a_continue.http)."""
