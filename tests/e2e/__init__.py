"""End-to-end suites: the README walkthrough and snippets, the a2a-sdk client at the gateway."""
