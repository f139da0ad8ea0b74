"""Fixtures of the use-case tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.fakes import HeldAgent, StartFake


@pytest.fixture
async def held(fake_agent: StartFake) -> AsyncIterator[tuple[HeldAgent, str, list[dict[str, Any]]]]:
    """A fake agent that holds its answer to the first follow-up: it, its URL, its requests."""
    agent = HeldAgent()
    fake = await fake_agent(agent)
    try:
        yield agent, fake.url, fake.received
    finally:
        agent.release.set()  # let the held handler finish before the agent shuts down
