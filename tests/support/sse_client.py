"""Read server-sent events from a response, as a browser's EventSource would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec


@dataclass
class Event:
    """One SSE event (or a comment line, with ``comment`` set and nothing else)."""

    event: str | None = None
    id: str | None = None
    data_lines: list[str] = field(default_factory=list)
    comment: str | None = None

    @property
    def data(self) -> str:
        return "\n".join(self.data_lines)

    def json(self) -> Any:
        return msgspec.json.decode(self.data)


async def events(response: aiohttp.ClientResponse, comments: bool = False) -> AsyncIterator[Event]:
    """Yield each event of the response as it arrives (comments too when asked)."""
    current = Event()
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if line == "":
            if current.data_lines or current.event or current.id:
                yield current
            current = Event()
        elif line.startswith(":"):
            if comments:
                yield Event(comment=line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                current.data_lines.append(value)
            elif name == "event":
                current.event = value
            elif name == "id":
                current.id = value


async def all_events(response: aiohttp.ClientResponse) -> list[Event]:
    """Read the whole stream."""
    return [event async for event in events(response)]
