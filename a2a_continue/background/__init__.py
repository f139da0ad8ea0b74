"""Loops each process runs beside its requests: the watcher and the sweeps."""
