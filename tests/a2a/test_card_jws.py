"""Card signatures on the wire: each canonical form is the one its verifier computes (checked
with the official SDKs themselves), JWS signing, and what a signature header may say."""

from __future__ import annotations

import base64
import copy
import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jwt import PyJWK

from a2a_continue.a2a import card_form03, card_form10, card_jws
from a2a_continue.a2a.card_jws import SignatureProblem
from a2a_continue.facade.card import facade_card
from a2a_continue.runtime.signing_keys import public_jwk

JSON = dict[str, Any]
SDK03 = Path(__file__).parent.parent / "support" / "sdk03"
SDK03_PY = SDK03 / ".venv" / "bin" / "python"
KEY = ec.generate_private_key(ec.SECP256R1())
JWK = public_jwk(KEY)
HEADER = {"alg": "ES256", "kid": JWK["kid"], "typ": "JOSE", "jku": "http://gw/jwks.json"}

AGENT_CARD: JSON = {
    "name": "Forecaster",
    "description": "Gives the weather — and the tides.",
    "version": "2.3.0",
    "url": "http://10.0.0.8:9000/",
    "protocolVersion": "0.3.0",
    "preferredTransport": "JSONRPC",
    "additionalInterfaces": [{"url": "http://10.0.0.8:9000/", "transport": "HTTP+JSON"}],
    "provider": {"organization": "Météo", "url": "https://example.org"},
    "iconUrl": "",
    "capabilities": {
        "streaming": False,
        "stateTransitionHistory": True,
        "extensions": [
            {
                "uri": "urn:x",
                "required": False,
                "params": {"n": 1, "f": 2.5, "big": 2**40, "none": None, "list": [None, "", 1e-7]},
            }
        ],
    },
    "securitySchemes": {
        "key": {"type": "apiKey", "in": "header", "name": "X-Key"},
        "oauth": {
            "type": "oauth2",
            "flows": {"clientCredentials": {"tokenUrl": "t", "scopes": {}}},
        },
    },
    "security": [{"key": []}],
    "supportsAuthenticatedExtendedCard": True,
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [
        {"id": "s", "name": "S", "description": "", "tags": [], "examples": ["Zürich"], "x": 1}
    ],
    "unknownMember": {"kept": "by the exact form only"},
}


def sdk_verifies(card: JSON) -> bool:
    """Tell whether a2a-sdk 1.x's verifier, keyed to JWK, accepts ``card`` as served."""
    verifier = create_signature_verifier(lambda kid, jku: PyJWK(JWK), ["ES256"])
    try:
        verifier(parse_agent_card(json.loads(json.dumps(card))))
    except InvalidSignaturesError:
        return False
    return True


def signed_over(card: JSON, payload: bytes) -> JSON:
    return {**card, "signatures": [card_jws.sign(payload, KEY, HEADER)]}


@pytest.fixture(autouse=True)
def quiet_sdk(caplog: pytest.LogCaptureFixture) -> None:
    # The SDK logs a warning for each card missing a field the spec calls required.
    caplog.set_level(logging.ERROR, "a2a")


CARDS = [
    AGENT_CARD,
    *(facade_card(AGENT_CARD, "x", "http://gw/a2a/1", v) for v in (None, "1.0", "0.3")),
    facade_card(None, "weather", "http://gw/a2a/2"),
]


@pytest.mark.parametrize("card", CARDS, ids=["agent-0.3", "both", "1.0", "0.3", "synthesized"])
def test_a_signature_over_the_sdk_1x_form_is_accepted_by_that_sdk(card: JSON) -> None:
    assert sdk_verifies(signed_over(card, card_form10.form(card)))
    assert not sdk_verifies(signed_over(card, card_form10.form(card) + b" "))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.text(max_size=8)
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    params=st.dictionaries(st.text(max_size=6), json_values, max_size=4),
    description=st.text(max_size=20),
    examples=st.lists(st.text(max_size=6), max_size=3),
)
def test_every_facade_card_signed_by_the_gateway_verifies_with_the_sdk(
    params: JSON, description: str, examples: list[str]
) -> None:
    agent = copy.deepcopy(AGENT_CARD)
    agent["description"] = description
    agent["capabilities"]["extensions"][0]["params"] = params
    agent["skills"][0]["examples"] = examples
    for version in (None, "1.0", "0.3"):
        card = card_jws.sign_card(facade_card(agent, "x", "http://gw/a2a/1", version), KEY, HEADER)
        assert sdk_verifies(card)


@pytest.mark.skipif(not SDK03_PY.exists(), reason="run `make sdk03-client`")
def test_the_0_3_form_is_the_one_a2a_sdk_0_3_computes() -> None:
    odd = {**AGENT_CARD, "capabilities": {"streaming": "yes"}, "securitySchemes": {"b": {}}}
    cards = [*CARDS, odd, {**AGENT_CARD, "url": None}, {**AGENT_CARD, "skills": [{"id": 1}]}]
    lines = "".join(json.dumps(c) + "\n" for c in cards)
    script = str(SDK03 / "canonical_forms.py")
    done = subprocess.run(
        [str(SDK03_PY), script], input=lines, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    for card, expected in zip(cards, done.stdout.splitlines(), strict=True):
        try:
            mine = card_form03.form(card).decode()
        except card_form03.FormError:
            mine = "ERR"
        assert mine == expected


def test_a_served_card_carries_one_signature_per_distinct_form() -> None:
    both = card_jws.sign_card(facade_card(AGENT_CARD, "x", "http://gw/a2a/1"), KEY, HEADER)
    unsigned = {k: v for k, v in both.items() if k != "signatures"}
    payloads = card_jws.payloads(unsigned)
    assert payloads[0] == rfc8785.dumps(unsigned)  # the exact JSON served comes first
    assert len(payloads) == len(set(payloads)) == len(both["signatures"]) == 3
    for entry, payload in zip(both["signatures"], payloads, strict=True):
        assert card_jws.verifies(card_jws.read_signature(entry), payload, JWK)


def test_a_card_with_no_rfc_8785_form_is_still_signed_in_the_sdk_forms() -> None:
    # An integer past 2**53 has no RFC 8785 form; the SDKs' forms read it as a double.
    agent = copy.deepcopy(AGENT_CARD)
    agent["capabilities"]["extensions"][0]["params"]["big"] = 10**22
    card = facade_card(agent, "x", "http://gw/a2a/1")
    signed = card_jws.sign_card(card, KEY, HEADER)
    assert len(signed["signatures"]) == 2
    assert sdk_verifies(signed)


def test_the_agents_own_signatures_are_replaced() -> None:
    card = {**AGENT_CARD, "signatures": [{"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c"}]}
    signed = card_jws.sign_card(card, KEY, HEADER)
    assert card["signatures"][0] not in signed["signatures"]


def protected(header: JSON) -> str:
    return base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ({"alg": "none", "kid": "k"}, "algorithm"),
        ({"alg": "HS256", "kid": "k"}, "algorithm"),
        ({"alg": "PS256", "kid": "k"}, "algorithm"),
        ({"kid": "k"}, "algorithm"),
        ({"alg": "ES256", "kid": "k", "crit": ["exp"]}, "malformed"),
        ({"alg": "ES256", "kid": "k", "b64": False}, "malformed"),
        ({"alg": "ES256", "kid": 7}, "malformed"),
    ],
    ids=["none", "hmac", "not-allowed", "no-alg", "crit", "unencoded", "kid-not-a-string"],
)
def test_a_header_that_cannot_be_trusted_is_refused_with_its_reason(
    header: JSON, reason: str
) -> None:
    with pytest.raises(SignatureProblem) as refused:
        card_jws.read_signature({"protected": protected(header), "signature": "c2ln"})
    assert refused.value.reason == reason


@pytest.mark.parametrize(
    ("jwk", "alg", "fits"),
    [
        (JWK, "ES256", True),
        (JWK, "RS256", False),
        ({**JWK, "alg": "ES384"}, "ES256", False),
        ({**JWK, "use": "enc"}, "ES256", False),
        ({**JWK, "d": "AA"}, "ES256", False),
        ({"kty": "OKP", "crv": "Ed25519", "x": "AA"}, "EdDSA", True),
        ({"kty": "oct", "k": "c2VjcmV0"}, "ES256", False),
    ],
    ids=["ec", "other-alg", "declares-other-alg", "encryption-key", "private", "okp", "secret"],
)
def test_only_a_public_key_of_the_signatures_type_is_used(jwk: JSON, alg: str, fits: bool) -> None:
    assert card_jws.fits(jwk, alg) is fits


def test_card_canonicalization_follows_rfc_8785_number_formatting() -> None:
    # RFC 8785 §3.2.2.3 and Appendix B: ECMAScript number serialization.
    values = [1e21, 1e-7, 333333333.3333333, 1e23, 5e-324, -0.0, 4.5, 2**53 - 1, 0.000001]
    expected = b"[1e+21,1e-7,333333333.3333333,1e+23,5e-324,0,4.5,9007199254740991,0.000001]"
    assert rfc8785.dumps(values) == expected
    # Members sort by UTF-16 code units, not code points (RFC 8785 §3.2.3).
    assert rfc8785.dumps({"\U0001f600": 1, "\ufb33": 2}) == (
        b'{"\xf0\x9f\x98\x80":1,"\xef\xac\xb3":2}'
    )
