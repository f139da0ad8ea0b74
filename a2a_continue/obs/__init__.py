"""Observability: logs, metrics, traces."""
