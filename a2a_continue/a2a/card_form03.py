"""The canonical form a2a-sdk 0.3 signs and verifies an agent card in.

That SDK reads the card into its pydantic ``AgentCard`` model (members it does not know are
ignored, booleans read leniently), dumps the model by alias leaving out every field at its
default or null (a security scheme's ``type`` included: it is its class's default), removes
empty strings, lists and objects at every depth, and writes the rest with ``json.dumps``
(sorted keys, no spaces, non-ASCII escaped): not RFC 8785, but what its signer signs and its
verifier rebuilds. This module computes the same bytes from a card's JSON without the SDK;
the models' shape is the table below.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from a2a_continue.a2a.card_form10 import FormError

JSON = dict[str, Any]

_REQUIRED = object()


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a model: its alias, its Python name, its type, its default."""

    alias: str
    name: str
    kind: str  # "str", "bool", "any", "strs", "str-map", "requirements", "enum:…",
    # "literal:…", or "model:", "models:", "model-map:" followed by a model's name
    default: Any = None


def _f(alias: str, name: str, kind: str = "str", default: Any = None) -> Field:
    return Field(alias, name, kind, default)


def _required(alias: str, name: str, kind: str = "str") -> Field:
    return Field(alias, name, kind, _REQUIRED)


_FLOWS = {
    "AuthorizationCodeOAuthFlow": (
        _required("authorizationUrl", "authorization_url"),
        _f("refreshUrl", "refresh_url"),
        _required("scopes", "scopes", "str-map"),
        _required("tokenUrl", "token_url"),
    ),
    "ClientCredentialsOAuthFlow": (
        _f("refreshUrl", "refresh_url"),
        _required("scopes", "scopes", "str-map"),
        _required("tokenUrl", "token_url"),
    ),
    "ImplicitOAuthFlow": (
        _required("authorizationUrl", "authorization_url"),
        _f("refreshUrl", "refresh_url"),
        _required("scopes", "scopes", "str-map"),
    ),
    "PasswordOAuthFlow": (
        _f("refreshUrl", "refresh_url"),
        _required("scopes", "scopes", "str-map"),
        _required("tokenUrl", "token_url"),
    ),
}

# The 0.3 models (a2a-sdk 0.3's a2a.types), in the order pydantic tries a union's members.
SCHEMES = (
    "APIKeySecurityScheme",
    "HTTPAuthSecurityScheme",
    "OAuth2SecurityScheme",
    "OpenIdConnectSecurityScheme",
    "MutualTLSSecurityScheme",
)
MODELS: dict[str, tuple[Field, ...]] = {
    "AgentCard": (
        _f("additionalInterfaces", "additional_interfaces", "models:AgentInterface"),
        _required("capabilities", "capabilities", "model:AgentCapabilities"),
        _required("defaultInputModes", "default_input_modes", "strs"),
        _required("defaultOutputModes", "default_output_modes", "strs"),
        _required("description", "description"),
        _f("documentationUrl", "documentation_url"),
        _f("iconUrl", "icon_url"),
        _required("name", "name"),
        _f("preferredTransport", "preferred_transport", default="JSONRPC"),
        _f("protocolVersion", "protocol_version", default="0.3.0"),
        _f("provider", "provider", "model:AgentProvider"),
        _f("security", "security", "requirements"),
        _f("securitySchemes", "security_schemes", "model-map:SecurityScheme"),
        _f("signatures", "signatures", "models:AgentCardSignature"),
        _required("skills", "skills", "models:AgentSkill"),
        _f("supportsAuthenticatedExtendedCard", "supports_authenticated_extended_card", "bool"),
        _required("url", "url"),
        _required("version", "version"),
    ),
    "AgentCapabilities": (
        _f("extensions", "extensions", "models:AgentExtension"),
        _f("pushNotifications", "push_notifications", "bool"),
        _f("stateTransitionHistory", "state_transition_history", "bool"),
        _f("streaming", "streaming", "bool"),
    ),
    "AgentExtension": (
        _f("description", "description"),
        _f("params", "params", "any"),
        _f("required", "required", "bool"),
        _required("uri", "uri"),
    ),
    "AgentInterface": (_required("transport", "transport"), _required("url", "url")),
    "AgentProvider": (_required("organization", "organization"), _required("url", "url")),
    "AgentSkill": (
        _required("description", "description"),
        _f("examples", "examples", "strs"),
        _required("id", "id"),
        _f("inputModes", "input_modes", "strs"),
        _required("name", "name"),
        _f("outputModes", "output_modes", "strs"),
        _f("security", "security", "requirements"),
        _required("tags", "tags", "strs"),
    ),
    "AgentCardSignature": (
        _f("header", "header", "any"),
        _required("protected", "protected"),
        _required("signature", "signature"),
    ),
    "APIKeySecurityScheme": (
        _f("description", "description"),
        _required("in", "in_", "enum:cookie,header,query"),
        _required("name", "name"),
        _f("type", "type", "literal:apiKey", "apiKey"),
    ),
    "HTTPAuthSecurityScheme": (
        _f("bearerFormat", "bearer_format"),
        _f("description", "description"),
        _required("scheme", "scheme"),
        _f("type", "type", "literal:http", "http"),
    ),
    "OAuth2SecurityScheme": (
        _f("description", "description"),
        _required("flows", "flows", "model:OAuthFlows"),
        _f("oauth2MetadataUrl", "oauth2_metadata_url"),
        _f("type", "type", "literal:oauth2", "oauth2"),
    ),
    "OpenIdConnectSecurityScheme": (
        _f("description", "description"),
        _required("openIdConnectUrl", "open_id_connect_url"),
        _f("type", "type", "literal:openIdConnect", "openIdConnect"),
    ),
    "MutualTLSSecurityScheme": (
        _f("description", "description"),
        _f("type", "type", "literal:mutualTLS", "mutualTLS"),
    ),
    "OAuthFlows": (
        _f("authorizationCode", "authorization_code", "model:AuthorizationCodeOAuthFlow"),
        _f("clientCredentials", "client_credentials", "model:ClientCredentialsOAuthFlow"),
        _f("implicit", "implicit", "model:ImplicitOAuthFlow"),
        _f("password", "password", "model:PasswordOAuthFlow"),
    ),
    **_FLOWS,
}

# What pydantic's lax mode reads as a boolean.
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise FormError("a boolean is not one")


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise FormError("a string is not one")
    return value


def _strs(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise FormError("a list of strings is not a list")
    return [_str(item) for item in value]


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise FormError("a map of strings is not an object")
    return {key: _str(item) for key, item in value.items()}


def _requirements(value: Any) -> list[dict[str, list[str]]]:
    if not isinstance(value, list) or not all(isinstance(entry, dict) for entry in value):
        raise FormError("security requirements are not a list of objects")
    return [{name: _strs(scopes) for name, scopes in entry.items()} for entry in value]


def _any(value: Any) -> Any:
    if not isinstance(value, dict):
        raise FormError("an object is not one")
    return value


_SCALARS: dict[str, Callable[[Any], Any]] = {
    "str": _str,
    "bool": _bool,
    "strs": _strs,
    "str-map": _str_map,
    "requirements": _requirements,
    "any": _any,
}


def _read(kind: str, value: Any) -> Any:
    """Validate one field's value and return what the model dump writes for it."""
    if kind in _SCALARS:
        return _SCALARS[kind](value)
    what, _, arg = kind.partition(":")
    if what == "enum" or what == "literal":
        if value not in arg.split(","):
            raise FormError(f"{value!r} is not one of {arg}")
        return value
    if what == "models":
        if not isinstance(value, list):
            raise FormError(f"a list of {arg} is not a list")
        return [model(item, arg) for item in value]
    if what == "model-map":
        if not isinstance(value, dict):
            raise FormError(f"a map of {arg} is not an object")
        return {key: model(item, arg) for key, item in value.items()}
    return model(value, arg)


def _scheme(value: Any) -> JSON:
    """A security scheme: the union member pydantic picks (most fields set, then first)."""
    best: tuple[int, JSON] | None = None
    for name in SCHEMES:
        try:
            dumped = model(value, name)
        except FormError:
            continue
        given = sum(1 for f in MODELS[name] if f.alias in value or f.name in value)
        if best is None or given > best[0]:
            best = (given, dumped)
    if best is None:
        raise FormError("a security scheme is none of the 0.3 kinds")
    return best[1]


def model(value: Any, name: str) -> JSON:
    """Validate ``value`` as the model ``name``; return its dump (defaults and nulls left out)."""
    if name == "SecurityScheme":
        return _scheme(value)
    if not isinstance(value, dict):
        raise FormError(f"a {name} is not an object")
    dumped: JSON = {}
    for field in MODELS[name]:
        key = field.alias if field.alias in value else field.name
        if key not in value:
            if field.default is _REQUIRED:
                raise FormError(f"a {name} has no {field.alias}")
            continue
        item = value[key]
        if item is None:
            if field.default is _REQUIRED:
                raise FormError(f"a {name}'s {field.alias} is null")
            continue
        read = _read(field.kind, item)
        if read != field.default:
            dumped[field.alias] = read
    return dumped


def clean(value: Any) -> Any:
    """Drop empty strings, lists, objects (and nulls) at every depth, as that SDK does."""
    if isinstance(value, dict):
        kept = {k: c for k, v in value.items() if (c := clean(v)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [c for v in value if (c := clean(v)) is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def form(card: JSON) -> bytes:
    """The bytes a2a-sdk 0.3 signs for ``card`` and checks its signatures against."""
    dumped = model(card, "AgentCard")
    dumped.pop("signatures", None)
    try:
        text = json.dumps(clean(dumped), separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise FormError(f"the card has no 0.3 form ({exc})") from None
    return text.encode()
