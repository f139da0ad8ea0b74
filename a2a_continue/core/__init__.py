"""What the gateway does: each use case beside its SQL."""
