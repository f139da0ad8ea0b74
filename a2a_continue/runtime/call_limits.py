"""Outbound isolation: a bounded number of calls per registered agent, none queued."""

from __future__ import annotations

import uuid

import aiohttp

from a2a_continue.a2a.netguard import guarded_connector
from a2a_continue.errors import AppError
from a2a_continue.settings import Settings


class AgentBusy(AppError):
    status, slug, title = 503, "agent-busy", "Too many calls to this agent are in flight"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.headers["Retry-After"] = "1"


class AgentSlots:
    """Counts the calls in flight per agent in this process; past the limit, refuse at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._busy: dict[uuid.UUID | str, int] = {}

    def take(self, agent: uuid.UUID | str) -> None:
        """Take one of the agent's slots, or raise AgentBusy (503); ``give`` returns it."""
        busy = self._busy.get(agent, 0)
        if busy >= self.limit:
            raise AgentBusy(
                f"{busy} calls to this agent are already in flight (the limit is {self.limit});"
                " retry shortly"
            )
        self._busy[agent] = busy + 1

    def give(self, agent: uuid.UUID | str) -> None:
        """Return a slot taken with ``take``."""
        left = self._busy[agent] - 1
        if left:
            self._busy[agent] = left
        else:
            del self._busy[agent]

    def slot(self, agent: uuid.UUID | str) -> HeldSlot:
        """Hold one of the agent's slots for a ``with`` block, or raise AgentBusy (503)."""
        return HeldSlot(self, agent)


class HeldSlot:
    """One agent slot held for a block (a class: it is on every call's path)."""

    __slots__ = ("agent", "slots")

    def __init__(self, slots: AgentSlots, agent: uuid.UUID | str) -> None:
        self.slots, self.agent = slots, agent

    def __enter__(self) -> None:
        self.slots.take(self.agent)

    def __exit__(self, *exc: object) -> None:
        self.slots.give(self.agent)


def agent_session(settings: Settings) -> aiohttp.ClientSession:
    """The outbound session: the connector never queues (calls are bounded per agent
    instead), reaches only addresses the guard allows, and it keeps no cookies.

    Each call site also checks its URL first (``netguard.check_call_url``, so a refusal
    names the agent's address) and bounds its own call, so the session sets no timeout of
    its own (a second timer per call).
    """
    connector = guarded_connector(settings.agent_networks, limit=0, limit_per_host=0)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=None),
        # The session serves every caller: a cookie one agent answer sets must never ride
        # along on another caller's call.
        cookie_jar=aiohttp.DummyCookieJar(),
    )
