"""Tests of the A2A facade (a2a_continue.facade)."""
