"""The live event streams of the failover drills: each reads its task's events over SSE, and
when the stream is cut (a replica's database gone, a 503 at reconnect) opens it again with
Last-Event-ID, until the task's last event; its seqs must then run 1, 2, ... with no gap."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import aiohttp
from failover_load import AUTH, Figures, SmokeFailure, start

TERMINAL = {"completed", "canceled", "failed", "rejected"}


@dataclass
class Stream:
    task: str
    path: str
    seqs: list[int] = field(default_factory=list)
    resumes: int = 0
    ended: bool = False  # the task's terminal event was read
    first: asyncio.Event = field(default_factory=asyncio.Event)
    reader: asyncio.Task[None] | None = None

    def contiguous(self) -> bool:
        return self.ended and self.seqs == list(range(1, len(self.seqs) + 1))

    async def read(self, session: aiohttp.ClientSession, figures: Figures) -> None:
        """To the task's last event, resuming after each cut; bounded by the caller."""
        while True:
            headers = {**AUTH, "Accept": "text/event-stream"}
            if self.seqs:
                headers["Last-Event-ID"] = str(self.seqs[-1])
            try:
                timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=60)
                async with session.get(
                    figures.base() + self.path, headers=headers, timeout=timeout
                ) as response:
                    figures.statuses[f"{response.status} (SSE)"] += 1
                    if response.status == 500:
                        figures.statuses["500"] += 1
                    if response.status == 200:
                        await self.events(response)
            except (TimeoutError, aiohttp.ClientError):
                figures.statuses["connection error (SSE)"] += 1
            if self.ended:
                return
            self.resumes += 1
            await asyncio.sleep(0.3)

    async def events(self, response: aiohttp.ClientResponse) -> None:
        event_id: str | None = None
        data = ""
        async for raw in response.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif line == "" and event_id is not None:
                self.seqs.append(int(event_id))
                self.ended = json.loads(data or "{}").get("newState") in TERMINAL
                self.first.set()
                event_id, data = None, ""


async def open_streams(
    session: aiohttp.ClientSession, figures: Figures, agent: str, count: int
) -> list[Stream]:
    """``count`` tasks asking their question, each with its stream open (its first event
    read)."""
    streams = []
    for n in range(count):
        task = await start(session, figures, agent, f"streamed {n}?")
        stream = Stream(task, f"/v1/a2a/{agent}/tasks/{task}/events")
        stream.reader = asyncio.create_task(stream.read(session, figures))
        streams.append(stream)
    try:
        async with asyncio.timeout(60):
            await asyncio.gather(*(s.first.wait() for s in streams))
    except TimeoutError:
        raise SmokeFailure("streams without their first event after 60 s") from None
    return streams
