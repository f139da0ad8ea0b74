"""Secrets: the encryption key's encodings and the sealing of credentials."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag

from a2a_continue.runtime.secrets import (
    EncryptionKeyError,
    Sealer,
    decode_key,
    load_or_create_secrets,
    new_key,
)

# 32 bytes whose encodings differ: standard base64 has '+' and '/', URL-safe '-' and '_'.
KEY = bytes([0xFB, 0xFF, 0xBF] * 10 + [0x01, 0x02])
STANDARD = base64.b64encode(KEY).decode()
URLSAFE = base64.urlsafe_b64encode(KEY).decode()
CREDENTIALS = {"type": "bearer", "token": "s3cret-token"}


def test_key_encodings_under_test_differ() -> None:
    assert "+" in STANDARD and "/" in STANDARD
    assert "-" in URLSAFE and "_" in URLSAFE


@pytest.mark.parametrize(
    "text",
    [STANDARD, URLSAFE, STANDARD.rstrip("="), URLSAFE.rstrip("="), f"  {STANDARD}\n"],
    ids=["standard", "urlsafe", "standard-unpadded", "urlsafe-unpadded", "surrounding-space"],
)
def test_decode_key_accepts_base64_and_urlsafe_base64_of_32_bytes(text: str) -> None:
    assert decode_key(text) == KEY


def test_new_key_decodes_to_32_bytes() -> None:
    assert len(decode_key(new_key())) == 32
    assert new_key() != new_key()


@pytest.mark.parametrize(
    "text",
    [
        "",
        base64.b64encode(bytes(16)).decode(),
        base64.b64encode(bytes(31)).decode(),
        base64.b64encode(bytes(33)).decode(),
        KEY.hex(),
        "not base64 at all!",
        "é" * 44,
    ],
    ids=["empty", "16-bytes", "31-bytes", "33-bytes", "hex", "garbage", "non-ascii"],
)
def test_decode_key_rejects_anything_but_32_bytes_of_base64(text: str) -> None:
    with pytest.raises(EncryptionKeyError):
        decode_key(text)


def test_sealed_value_opens_to_the_same_value() -> None:
    sealer = Sealer(KEY)
    assert sealer.open(sealer.seal(CREDENTIALS, b"agent-1"), b"agent-1") == CREDENTIALS


def test_sealed_value_hides_the_plaintext_and_differs_each_time() -> None:
    sealer = Sealer(KEY)
    first, second = sealer.seal(CREDENTIALS), sealer.seal(CREDENTIALS)
    assert first != second
    assert b"s3cret-token" not in first
    assert json.dumps(CREDENTIALS).encode() not in first


@pytest.mark.parametrize("index", [0, 12, -1], ids=["nonce", "ciphertext", "tag"])
def test_tampered_sealed_value_does_not_open(index: int) -> None:
    sealer = Sealer(KEY)
    sealed = bytearray(sealer.seal(CREDENTIALS))
    sealed[index] ^= 0x01
    with pytest.raises(InvalidTag):
        sealer.open(bytes(sealed))


def test_sealed_value_does_not_open_for_another_context() -> None:
    sealer = Sealer(KEY)
    with pytest.raises(InvalidTag):
        sealer.open(sealer.seal(CREDENTIALS, b"agent-1"), b"agent-2")


def test_sealed_value_does_not_open_with_another_key() -> None:
    sealed = Sealer(KEY).seal(CREDENTIALS)
    with pytest.raises(InvalidTag):
        Sealer(decode_key(new_key())).open(sealed)


def test_generated_secrets_are_created_once_and_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    created = load_or_create_secrets(data_dir)
    assert load_or_create_secrets(data_dir) == created
    assert len(decode_key(created["encryption_key"])) == 32
    assert len(created["jwt_secret"]) >= 32
    assert (data_dir / "secrets.json").stat().st_mode & 0o077 == 0


def test_decode_key_rejects_a_key_with_stray_characters() -> None:
    text = base64.b64encode(bytes(range(32))).decode()
    with pytest.raises(EncryptionKeyError):
        decode_key(text[:10] + "!*" + text[10:])
