"""The messages a caller sends to an agent, in either version's shape, and the bodies that
carry them (a start, a follow-up, a cancel), with the rules msgspec cannot express."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, UnsetType

from a2a_continue.core.shapes.wire import Base
from a2a_continue.errors import Invalid
from a2a_continue.limits import MAX_ID_CHARS


class FileContent(Base):
    bytes: str | None = None
    uri: str | None = None
    name: str | None = None
    mime_type: str | None = None


class Part(Base):
    """A message part in the 0.3 (``kind``) or the 1.0 (flat) shape."""

    kind: Literal["text", "file", "data"] | None = None
    text: str | None = None
    file: FileContent | None = None
    data: Any | UnsetType = UNSET
    raw: str | None = None
    url: str | None = None
    filename: str | None = None
    media_type: str | None = None
    metadata: dict[str, Any] | None = None


class Message(Base):
    """An A2A message as a client may send it, in either version's shape."""

    parts: Annotated[list[Part], Meta(min_length=1)]
    kind: Literal["message"] | None = None
    message_id: str | None = None
    role: str | None = None
    task_id: str | None = None
    # A start may name a context to join; one the store cannot keep is refused before the call.
    context_id: Annotated[str, Meta(max_length=MAX_ID_CHARS)] | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None


class Configuration(Base):
    history_length: Annotated[int, Meta(ge=0)] | None = None
    accepted_output_modes: list[str] | None = None
    return_immediately: bool | None = None


class ContinueBody(Base):
    """Body of a follow-up: exactly one of ``message`` or ``text``."""

    message: Message | None = None
    text: Annotated[str, Meta(min_length=1)] | None = None
    configuration: Configuration | None = None
    metadata: dict[str, Any] | None = None

    @classmethod
    def explain(cls, loc: str, msg: str) -> str:
        return send_hint(loc, msg)


class StartBody(ContinueBody):
    """Body of a first message; it may name one of the caller's teams."""

    team_id: str | None = None


class CancelBody(Base):
    """Body of a cancel: empty or ``{}``."""


# What msgspec calls the JSON type it found, as a sentence says it.
_FOUND = {"str": "a string", "array": "an array", "int": "a number", "float": "a number",
          "bool": "a boolean"}  # fmt: skip
_NOT_AN_OBJECT = re.compile(r"Expected `object \| null`, got `(\w+)`")
_PLAIN_TEXT = 'for plain text send {"text": "hi"} instead of a message'


def send_hint(loc: str, msg: str) -> str:
    """Say how a start or a follow-up is written where the usual mistakes are made (a message
    that is a string, text outside the parts)."""
    if loc != "$.message":
        return msg
    found = _NOT_AN_OBJECT.fullmatch(msg)
    if found is not None:
        got = _FOUND.get(found[1], found[1])
        return (
            f'a message is an object with `parts`, such as {{"parts": [{{"text": "hi"}}]}},'
            f" not {got}; {_PLAIN_TEXT}"
        )
    if msg == "Object contains unknown field `text`":
        return 'a message carries its text in `parts`: {"parts": [{"text": "hi"}]}; ' + _PLAIN_TEXT
    return msg


def check_parts(parts: list[Part], loc: str) -> None:
    """Refuse parts that carry no content or more than one kind of it."""
    errors = [
        {"loc": f"{loc}[{i}]", "msg": problem}
        for i, part in enumerate(parts)
        if (problem := part_problem(part))
    ]
    if errors:
        raise Invalid(errors)


def part_problem(part: Part) -> str | None:
    """Say what is wrong with one part, or None when it is a valid text, file or data part."""
    present = [
        name
        for name, value in (
            ("text", part.text),
            ("file", part.file),
            ("data", None if part.data is UNSET else True),
            ("raw", part.raw),
            ("url", part.url),
        )
        if value is not None
    ]
    if len(present) != 1:
        found = ", ".join(present) or "none"
        return f"a part needs exactly one of text, file, data, raw or url (found: {found})"
    if part.kind is not None and part.kind != present[0]:
        return f"a part of kind {part.kind!r} must carry {part.kind!r}, not {present[0]!r}"
    if part.file is not None and (part.file.bytes is None) == (part.file.uri is None):
        return "a file part needs exactly one of file.bytes or file.uri"
    return None


def check_send_body(body: ContinueBody) -> None:
    """Apply the rules msgspec cannot express: one of message/text, valid parts."""
    if (body.message is None) == (body.text is None):
        raise Invalid([{"loc": "$", "msg": "send exactly one of 'message' or 'text'"}])
    if body.message is not None:
        check_parts(body.message.parts, "$.message.parts")
