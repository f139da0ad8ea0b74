"""Speaking A2A to an agent: payloads of both versions, the outbound call, streamed answers."""
