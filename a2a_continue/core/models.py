"""Wire types: every body the gateway accepts or returns, and their decoding."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from a2a_continue.errors import Invalid
from a2a_continue.limits import MAX_ID_CHARS, MAX_JSON_DEPTH, TooDeep, body_nul_path, check_depth


class Base(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Every body the gateway accepts: camelCase, unknown fields refused."""


class Out(msgspec.Struct, kw_only=True, rename="camel"):
    """Every body the gateway returns: camelCase."""


Name = Annotated[str, Meta(min_length=1, max_length=200)]
Timeout = Annotated[float, Meta(gt=0, le=3600)]
Visibility = Literal["private", "team", "public"]
ProtocolVersion = Literal["0.3", "1.0"]


class BearerAuth(Base, tag_field="type", tag="bearer"):
    token: Annotated[str, Meta(min_length=1)]


class BasicAuth(Base, tag_field="type", tag="basic"):
    username: str
    password: str


class HeadersAuth(Base, tag_field="type", tag="headers"):
    headers: Annotated[dict[str, str], Meta(min_length=1)]


AgentAuth = BearerAuth | BasicAuth | HeadersAuth


class Capabilities(Base):
    """What an agent can do beyond a blocking send (§8.2)."""

    streaming: bool = False
    push_notifications: bool = False


class CardKeys(Base, omit_defaults=True):
    """Where the keys of an agent's card signatures are (SPEC §18): a JWK set's URL, or the
    public keys themselves."""

    jwks_url: str | None = None
    keys: Annotated[list[dict[str, Any]], Meta(min_length=1, max_length=20)] | None = None


class AgentCreate(Base):
    """A registration: ``endpointUrl`` + ``protocolVersion`` (+ ``name``), or ``cardUrl``."""

    name: Name | None = None
    endpoint_url: str | None = None
    protocol_version: ProtocolVersion | None = None
    card_url: str | None = None
    visibility: Visibility = "private"
    team_id: str | None = None
    auth: AgentAuth | None = None
    timeout_seconds: Timeout | None = None
    capabilities: Capabilities = msgspec.field(default_factory=Capabilities)
    card_keys: CardKeys | None = None
    require_signed_card: bool = False


class AgentPatch(Base):
    name: Name | UnsetType = UNSET
    endpoint_url: str | UnsetType = UNSET
    protocol_version: ProtocolVersion | UnsetType = UNSET
    visibility: Visibility | UnsetType = UNSET
    team_id: str | UnsetType | None = UNSET
    auth: AgentAuth | UnsetType | None = UNSET
    timeout_seconds: Timeout | UnsetType | None = UNSET
    card_url: str | UnsetType = UNSET
    capabilities: Capabilities | UnsetType = UNSET
    card_keys: CardKeys | UnsetType | None = UNSET
    require_signed_card: bool | UnsetType = UNSET


class AgentOut(Out):
    id: uuid.UUID
    name: str
    endpoint_url: str
    protocol_version: str
    visibility: str
    team_id: str | None
    owner: str
    auth_type: str
    timeout_seconds: float | None
    created_at: dt.datetime
    updated_at: dt.datetime
    capabilities: dict[str, Any] = msgspec.field(default_factory=dict)
    card: dict[str, Any] | None = None
    card_url: str | None = None
    card_keys: dict[str, Any] | None = None
    require_signed_card: bool = False
    # The outcome of the last check of the card's signatures (SPEC §18); None without a card.
    card_signature: dict[str, Any] | None = None


class AgentList(Out):
    agents: list[AgentOut]
    next_cursor: str | None


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


class StartBody(ContinueBody):
    """Body of a first message; it may name one of the caller's teams."""

    team_id: str | None = None


class CancelBody(Base):
    """Body of a cancel: empty or ``{}``."""


class TaskOut(Out):
    agent_id: uuid.UUID
    id: str
    context_id: str | None
    state: str
    status_message: dict[str, Any] | None
    artifacts: list[Any]
    owner: str
    team_id: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    completed_at: dt.datetime | None
    last_seq: int


class TaskList(Out):
    tasks: list[TaskOut]
    next_cursor: str | None


class EventOut(Out):
    seq: int
    type: str
    previous_state: str | None
    new_state: str | None
    actor: str
    data: dict[str, Any]
    created_at: dt.datetime


class EventList(Out):
    events: list[EventOut]
    next_after: int


T = TypeVar("T")

_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def decode_body(raw: bytes, kind: type[T]) -> T:
    """Decode ``raw`` as ``kind``; refuse it with a 422 that says where it is wrong."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    if not raw.strip():
        raise Invalid([{"loc": "$", "msg": "the request body is empty; expected a JSON object"}])
    check_storable_body(raw)
    try:
        value: T = decoder.decode(raw)
    except msgspec.ValidationError as exc:
        message, _, loc = str(exc).partition(" - at `")
        where = loc.rstrip("`") or "$"
        if issubclass(kind, ContinueBody):
            message = send_hint(where, message)
        raise Invalid([{"loc": where, "msg": message}]) from None
    except msgspec.DecodeError as exc:
        raise Invalid([{"loc": "$", "msg": f"the body is not valid JSON ({exc})"}]) from None
    return value


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


def check_storable_body(raw: bytes) -> None:
    """Refuse a body nested deeper than the limit or holding U+0000 anywhere (422)."""
    try:
        check_depth(raw)
    except TooDeep:
        msg = f"the body nests deeper than {MAX_JSON_DEPTH} levels"
        raise Invalid([{"loc": "$", "msg": msg}]) from None
    where = body_nul_path(raw)
    if where is not None:
        raise Invalid([{"loc": where, "msg": "must not contain U+0000"}])


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


def encode(value: object) -> bytes:
    """Encode a response body."""
    return msgspec.json.encode(value)
