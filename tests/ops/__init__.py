"""Tests of serving, start-up, the embedded database, the demo, the sample agent (ops)."""
