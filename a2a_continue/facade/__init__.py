"""The A2A façade: every registered agent reachable as an A2A agent at the gateway."""
