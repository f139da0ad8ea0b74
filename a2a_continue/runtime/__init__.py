"""What one process holds and lends: the pool, the hub, open streams, call limits."""
