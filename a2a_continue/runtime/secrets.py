"""Secrets of the service: the encryption of downstream credentials, generated secrets."""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12


class EncryptionKeyError(ValueError):
    """The encryption key is not 32 bytes of base64."""


def decode_key(text: str) -> bytes:
    """Decode a 32-byte key given as standard or URL-safe base64."""
    padded = text.strip() + "=" * (-len(text.strip()) % 4)
    for altchars in (b"+/", b"-_"):
        try:
            key = base64.b64decode(padded.encode("ascii"), altchars=altchars, validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            continue
        if len(key) == 32:
            return key
    raise EncryptionKeyError(
        "A2AC_ENCRYPTION_KEY must be 32 bytes encoded as base64 or URL-safe base64"
    )


class Sealer:
    """Encrypts and decrypts small JSON secrets with AES-256-GCM."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, value: object, context: bytes = b"") -> bytes:
        """Encrypt ``value`` as JSON; the result is nonce followed by ciphertext."""
        nonce = os.urandom(NONCE_BYTES)
        plain = json.dumps(value, separators=(",", ":")).encode()
        return nonce + self._aead.encrypt(nonce, plain, context)

    def open(self, sealed: bytes, context: bytes = b"") -> object:
        """Decrypt what ``seal`` produced."""
        nonce, body = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
        return json.loads(self._aead.decrypt(nonce, body, context))


def new_key() -> str:
    """Return a fresh 32-byte key as URL-safe base64."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def secrets_path(data_dir: Path) -> Path:
    """Where the generated secrets are kept in ``data_dir``."""
    return data_dir / "secrets.json"


def load_secrets(data_dir: Path) -> dict[str, str] | None:
    """Read the secrets kept in the data dir; None when there are none."""
    path = secrets_path(data_dir)
    if not path.exists():
        return None
    stored: dict[str, str] = json.loads(path.read_text())
    return stored


def load_or_create_secrets(data_dir: Path) -> dict[str, str]:
    """Read the JWT secret and encryption key kept in the data dir, creating them once."""
    stored = load_secrets(data_dir)
    if stored is not None:
        return stored
    path = secrets_path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    created = {"jwt_secret": secrets.token_urlsafe(48), "encryption_key": new_key()}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(created, out)
    return created
