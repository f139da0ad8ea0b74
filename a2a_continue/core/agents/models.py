"""The agents' wire types: a registration, a change, an agent as shown, their credentials."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from a2a_continue.core.shapes.wire import Base, Out

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
