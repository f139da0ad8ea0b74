"""The canonical form a2a-sdk 1.x signs and verifies an agent card in.

The SDK does not canonicalize the JSON it receives: its card resolver first reads the card
into the 1.0 ``AgentCard`` protobuf message (turning a 0.3 card's ``url``,
``preferredTransport``, ``security`` and typed ``securitySchemes`` into their 1.0 members,
dropping members the message does not know), writes that message back as ProtoJSON (members
at their default left out, ``Struct`` numbers as doubles), removes empty strings, lists and
objects at every depth, and canonicalizes the rest with RFC 8785. This module computes the
same bytes from a card's JSON without the SDK: the message's shape is the table below.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import rfc8785

JSON = dict[str, Any]

# The depth past which the SDK's cleaner and canonicalizer refuse a card.
MAX_DEPTH = 128


class FormError(ValueError):
    """The card has no form in this SDK (its reader would refuse it)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message: its ProtoJSON and proto names, its type and cardinality."""

    json: str
    proto: str
    kind: str  # "string", "bool", "Struct", or the name of a message below
    repeated: bool = False
    map: bool = False  # a map from strings to ``kind``
    presence: bool = False  # written even at its default once set
    oneof: str | None = None


def _f(json: str, proto: str, kind: str = "string", **flags: Any) -> Field:
    return Field(json, proto, kind, **flags)


_FLOW_FIELDS = {
    "AuthorizationCodeOAuthFlow": ("authorizationUrl", "tokenUrl", "refreshUrl"),
    "ClientCredentialsOAuthFlow": ("tokenUrl", "refreshUrl"),
    "ImplicitOAuthFlow": ("authorizationUrl", "refreshUrl"),
    "PasswordOAuthFlow": ("tokenUrl", "refreshUrl"),
    "DeviceCodeOAuthFlow": ("deviceAuthorizationUrl", "tokenUrl", "refreshUrl"),
}


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


def _flow(name: str) -> tuple[Field, ...]:
    fields = tuple(_f(m, _snake(m)) for m in _FLOW_FIELDS[name])
    extra = (_f("pkceRequired", "pkce_required", "bool"),) if name.startswith("Auth") else ()
    return (*fields, _f("scopes", "scopes", map=True), *extra)


_SCHEMES = (
    ("apiKeySecurityScheme", "APIKeySecurityScheme"),
    ("httpAuthSecurityScheme", "HTTPAuthSecurityScheme"),
    ("oauth2SecurityScheme", "OAuth2SecurityScheme"),
    ("openIdConnectSecurityScheme", "OpenIdConnectSecurityScheme"),
    ("mtlsSecurityScheme", "MutualTlsSecurityScheme"),
)
_FLOWS = (
    ("authorizationCode", "AuthorizationCodeOAuthFlow"),
    ("clientCredentials", "ClientCredentialsOAuthFlow"),
    ("implicit", "ImplicitOAuthFlow"),
    ("password", "PasswordOAuthFlow"),
    ("deviceCode", "DeviceCodeOAuthFlow"),
)

# The 1.0 AgentCard message (a2a.proto, package lf.a2a.v1) and the messages it holds.
MESSAGES: dict[str, tuple[Field, ...]] = {
    "AgentCard": (
        _f("name", "name"),
        _f("description", "description"),
        _f("supportedInterfaces", "supported_interfaces", "AgentInterface", repeated=True),
        _f("provider", "provider", "AgentProvider", presence=True),
        _f("version", "version"),
        _f("documentationUrl", "documentation_url", presence=True),
        _f("capabilities", "capabilities", "AgentCapabilities", presence=True),
        _f("securitySchemes", "security_schemes", "SecurityScheme", map=True),
        _f("securityRequirements", "security_requirements", "SecurityRequirement", repeated=True),
        _f("defaultInputModes", "default_input_modes", repeated=True),
        _f("defaultOutputModes", "default_output_modes", repeated=True),
        _f("skills", "skills", "AgentSkill", repeated=True),
        _f("signatures", "signatures", "AgentCardSignature", repeated=True),
        _f("iconUrl", "icon_url", presence=True),
    ),
    "AgentInterface": (
        _f("url", "url"),
        _f("protocolBinding", "protocol_binding"),
        _f("tenant", "tenant"),
        _f("protocolVersion", "protocol_version"),
    ),
    "AgentProvider": (_f("url", "url"), _f("organization", "organization")),
    "AgentCapabilities": (
        _f("streaming", "streaming", "bool", presence=True),
        _f("pushNotifications", "push_notifications", "bool", presence=True),
        _f("extensions", "extensions", "AgentExtension", repeated=True),
        _f("extendedAgentCard", "extended_agent_card", "bool", presence=True),
    ),
    "AgentExtension": (
        _f("uri", "uri"),
        _f("description", "description"),
        _f("required", "required", "bool"),
        _f("params", "params", "Struct", presence=True),
    ),
    "SecurityScheme": tuple(
        _f(json, _snake(json), kind, presence=True, oneof="scheme") for json, kind in _SCHEMES
    ),
    "APIKeySecurityScheme": (
        _f("description", "description"),
        _f("location", "location"),
        _f("name", "name"),
    ),
    "HTTPAuthSecurityScheme": (
        _f("description", "description"),
        _f("scheme", "scheme"),
        _f("bearerFormat", "bearer_format"),
    ),
    "OAuth2SecurityScheme": (
        _f("description", "description"),
        _f("flows", "flows", "OAuthFlows", presence=True),
        _f("oauth2MetadataUrl", "oauth2_metadata_url"),
    ),
    "OAuthFlows": tuple(
        _f(json, _snake(json), kind, presence=True, oneof="flow") for json, kind in _FLOWS
    ),
    **{name: _flow(name) for name in _FLOW_FIELDS},
    "OpenIdConnectSecurityScheme": (
        _f("description", "description"),
        _f("openIdConnectUrl", "open_id_connect_url"),
    ),
    "MutualTlsSecurityScheme": (_f("description", "description"),),
    "SecurityRequirement": (_f("schemes", "schemes", "StringList", map=True),),
    "StringList": (_f("list", "list", repeated=True),),
    "AgentSkill": (
        _f("id", "id"),
        _f("name", "name"),
        _f("description", "description"),
        _f("tags", "tags", repeated=True),
        _f("examples", "examples", repeated=True),
        _f("inputModes", "input_modes", repeated=True),
        _f("outputModes", "output_modes", repeated=True),
        _f("securityRequirements", "security_requirements", "SecurityRequirement", repeated=True),
    ),
    "AgentCardSignature": (
        _f("protected", "protected"),
        _f("signature", "signature"),
        _f("header", "header", "Struct", presence=True),
    ),
}

# A JSON member is read by its ProtoJSON name or its proto name.
_BY_KEY = {
    name: {**{f.proto: f for f in fields}, **{f.json: f for f in fields}}
    for name, fields in MESSAGES.items()
}
_ABSENT = object()

_LEGACY_SCHEMES = {
    "apiKey": "apiKeySecurityScheme",
    "http": "httpAuthSecurityScheme",
    "oauth2": "oauth2SecurityScheme",
    "openIdConnect": "openIdConnectSecurityScheme",
    "mutualTLS": "mtlsSecurityScheme",
}


def _legacy_security(requirements: Any) -> list[JSON]:
    return [
        {"schemes": {name: {"list": scopes} for name, scopes in entry.items()}}
        for entry in requirements
    ]


def upgrade(card: JSON) -> JSON:
    """Turn a 0.3 card's members into the 1.0 ones, as the SDK's resolver does first."""
    data = copy.deepcopy(card)
    if data.pop("supportsAuthenticatedExtendedCard", None):
        capabilities = data.setdefault("capabilities", {})
        if "extendedAgentCard" not in capabilities:
            capabilities["extendedAgentCard"] = True
    url = data.pop("url", None)
    transport = data.pop("preferredTransport", "JSONRPC")
    version = data.pop("protocolVersion", "0.3.0")
    extra = data.pop("additionalInterfaces", None) or []
    if "supportedInterfaces" not in data and url:
        data["supportedInterfaces"] = [
            {"url": url, "protocolBinding": transport, "protocolVersion": version},
            *(
                {"url": i.get("url"), "protocolBinding": i.get("transport")}
                | {"protocolVersion": version}
                for i in extra
            ),
        ]
    legacy = data.pop("security", None)
    if "securityRequirements" not in data and legacy is not None:
        data["securityRequirements"] = _legacy_security(legacy)
    for skill in data.get("skills", []):
        skill_legacy = skill.pop("security", None)
        if "securityRequirements" not in skill and skill_legacy is not None:
            skill["securityRequirements"] = _legacy_security(skill_legacy)
    schemes = data.get("securitySchemes", {})
    for scheme in schemes.values() if schemes else ():
        kind = scheme.pop("type", None)
        if kind in _LEGACY_SCHEMES:
            if kind == "apiKey" and "in" in scheme:
                scheme["location"] = scheme.pop("in")
            wrapped = {_LEGACY_SCHEMES[kind]: scheme.copy()}
            scheme.clear()
            scheme.update(wrapped)
    return data


def _scalar(field: Field, value: Any) -> Any:
    if field.kind == "bool":
        if not isinstance(value, bool):
            raise FormError(f"{field.json} is not a boolean")
        return value
    if not isinstance(value, str):
        raise FormError(f"{field.json} is not a string")
    return value


def _value(value: Any) -> Any:
    """A google.protobuf.Value read from JSON and written back (numbers become doubles)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        number = float(value)
        if math.isinf(number) or math.isnan(number):
            raise FormError("a number has no double value")
        return number
    if isinstance(value, list):
        return [_value(item) for item in value]
    if isinstance(value, dict):
        return {key: _value(item) for key, item in value.items()}
    raise FormError("a value is not JSON")


def _single(field: Field, value: Any) -> Any:
    if field.kind == "Struct":
        if not isinstance(value, dict):
            raise FormError(f"{field.json} is not an object")
        return _value(value)
    if field.kind in MESSAGES:
        return message(value, field.kind)
    return _scalar(field, value)


def _field(field: Field, value: Any) -> Any:
    if field.map:
        if not isinstance(value, dict):
            raise FormError(f"{field.json} is not an object")
        written = {key: _single(field, item) for key, item in value.items()}
        return written or _ABSENT
    if field.repeated:
        if not isinstance(value, list) or any(item is None for item in value):
            raise FormError(f"{field.json} is not a list of values")
        items = [_single(field, item) for item in value]
        return items or _ABSENT
    written = _single(field, value)
    if field.presence or field.kind in MESSAGES or field.kind == "Struct":
        return written
    return written if written not in ("", False) else _ABSENT


def message(value: Any, name: str) -> JSON:
    """Read ``value`` as the message ``name`` and write it back as ProtoJSON."""
    if isinstance(value, str):
        return {}  # the SDK's reader walks a string as an object whose members it ignores
    if not isinstance(value, dict):
        raise FormError(f"a {name} is not an object")
    fields = _BY_KEY[name]
    written: JSON = {}
    oneofs: set[str] = set()
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            continue
        if field.oneof is not None and item is not None:
            if field.oneof in oneofs:
                raise FormError(f"a {name} sets two members of {field.oneof}")
            oneofs.add(field.oneof)
        written.pop(field.json, None)
        if item is None:
            continue
        out = _field(field, item)
        if out is not _ABSENT:
            written[field.json] = out
    return written


def clean(value: Any, depth: int = 1) -> Any:
    """Drop empty strings, lists, objects (and nulls) at every depth, as the SDK does."""
    if isinstance(value, dict | list) and depth > MAX_DEPTH:
        raise FormError(f"the card nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        kept = {k: c for k, v in value.items() if (c := clean(v, depth + 1)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [c for v in value if (c := clean(v, depth + 1)) is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def form(card: JSON) -> bytes:
    """The bytes a2a-sdk 1.x signs for ``card`` and checks its signatures against."""
    try:
        written = message(upgrade(card), "AgentCard")
    except (TypeError, AttributeError, KeyError) as exc:
        raise FormError(f"the card's structure is not one the SDK reads ({exc})") from None
    written.pop("signatures", None)
    try:
        return rfc8785.dumps(clean(written))
    except rfc8785.CanonicalizationError as exc:
        raise FormError(f"the card has no canonical form ({exc})") from None
