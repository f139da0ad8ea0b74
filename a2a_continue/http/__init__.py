"""The REST edge: endpoints, the edge layer, the API description, SSE, tokens, paths."""
