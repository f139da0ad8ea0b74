"""How one update an agent reports is applied to the stored task (§8.1).

The update comes from the one reader (``a2a.answers``): a stream frame (`SendStreamingMessage`
/ `message/stream`, `SubscribeToTask` / `tasks/resubscribe`) or a task snapshot (`GetTask` /
`tasks/get`), so the stream relay and the watcher record changes through one function.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from a2a_continue.a2a import protocol
from a2a_continue.a2a.answers import ArtifactChunk, Update
from a2a_continue.a2a.protocol import JSON
from a2a_continue.core.tasks.reads import lock_task
from a2a_continue.core.tasks.store import apply_update
from a2a_continue.errors import NotFound
from a2a_continue.runtime.db import Conn, Record

SOURCES = frozenset({"stream", "subscribe", "poll", "refresh", "push"})


def same_status_message(stored: JSON | None, reported: JSON | None) -> bool:
    """Compare two status messages by `messageId` when both have one, else by content."""
    if stored is None or reported is None:
        return stored is reported
    stored_id, reported_id = stored.get("messageId"), reported.get("messageId")
    if isinstance(stored_id, str) and isinstance(reported_id, str):
        return stored_id == reported_id
    return stored == reported


def merge_artifacts(
    stored: list[Any], chunks: tuple[ArtifactChunk, ...]
) -> tuple[list[Any], list[str]]:
    """Merge reported artifacts into the stored list by `artifactId`; return it and changed ids.

    `append: true` adds the chunk's parts to the stored artifact; otherwise the reported
    artifact replaces it. An artifact without an id is kept as a new one unless an equal
    one is stored already.
    """
    merged = list(stored)
    changed: list[str] = []
    for chunk in chunks:
        new = chunk.artifact
        key = chunk.artifact_id
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and key is not None and old.get("artifactId") == key
            ),
            None,
        )
        if index is None:
            if key is None and new in merged:
                continue
            merged.append(new)
        else:
            old = merged[index]
            if chunk.append:
                parts = new.get("parts")
                extra = parts if isinstance(parts, list) else []
                old_parts = old.get("parts")
                new = {**old, **{k: v for k, v in new.items() if k != "parts"}}
                new["parts"] = (old_parts if isinstance(old_parts, list) else []) + extra
            if new == old:
                continue
            merged[index] = new
        if key is not None and key not in changed:
            changed.append(key)
    return merged, changed


@dataclass(frozen=True, slots=True)
class Applied:
    """The task after an update: its state, and the event appended (None when nothing changed)."""

    state: str
    seq: int | None
    row: Record


async def record_update(
    conn: Conn,
    row_id: uuid.UUID,
    update: Update,
    *,
    source: str,
    actor: str,
    event: str = "task_updated",
    data: dict[str, Any] | None = None,
    always: bool = False,
) -> Applied:
    """Apply an update to the task (§8.1) and append its event; nothing changed, no event.

    ``event``/``data``/``always`` let a streamed follow-up log its first frame as
    `task_continued` even when that frame changes nothing. A terminal task is never changed.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown update source {source!r}")
    async with conn.transaction():
        row = await lock_task(conn, row_id)
        if row is None:
            raise NotFound("the task no longer exists")
        previous: str = row["state"]
        state, status_message = previous, row["status_message"]
        artifacts: list[Any] = row["artifacts"]
        changed: list[str] = []
        status_changed = False
        if not protocol.is_terminal_task_state(previous):
            if update.state is not None and (
                update.state != previous
                or not same_status_message(status_message, update.status_message)
            ):
                state, status_message = update.state, update.status_message
                status_changed = True
            artifacts, changed = merge_artifacts(artifacts, update.artifacts)
        if not status_changed and artifacts == row["artifacts"] and not always:
            return Applied(previous, None, row)
        payload: dict[str, Any] = {"source": source, **(data or {})}
        if changed:
            payload["artifactIds"] = changed
        stored = await apply_update(
            conn,
            row_id,
            state,
            status_message,
            artifacts,
            event=event,
            previous=previous,
            actor=actor,
            data=payload,
        )
    return Applied(str(stored["state"]), int(stored["last_seq"]), stored)
