"""Tests of the A2A wire layer (a2a_continue.a2a)."""
