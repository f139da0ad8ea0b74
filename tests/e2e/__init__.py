"""End-to-end suites: the README walkthrough, the snippet of docs/facade.md, the a2a-sdk client."""
