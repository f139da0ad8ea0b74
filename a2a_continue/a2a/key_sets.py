"""The JWK sets agent cards are checked with: fetched through the address guard, bounded in
size and time like an agent call, kept per URL and looked up by ``kid``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
from aiohttp import hdrs

from a2a_continue.a2a.netguard import AddressRefused, check_call_url, refused_reason
from a2a_continue.settings import Network

JSON = dict[str, Any]

MAX_KEY_SET_BYTES = 1024 * 1024
# How long a fetched set is used as it is; an unknown kid refetches sooner, but at most this
# often per URL, so a card naming keys that do not exist cannot make the gateway hammer it.
KEPT_S = 600.0
REFETCH_S = 30.0
SETS_KEPT = 256
_CHUNK = 64 * 1024


class KeySetUnavailable(Exception):
    """A JWK set could not be fetched or read (the message says why, without secrets)."""


@dataclass(frozen=True, slots=True)
class _Fetched:
    keys: tuple[JSON, ...]
    at: float

    def kids(self) -> set[str | None]:
        return {key.get("kid") for key in self.keys}

    def matching(self, kid: str | None) -> list[JSON]:
        return [key for key in self.keys if kid is None or key.get("kid") == kid]


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    too_large = f"the key set is larger than {MAX_KEY_SET_BYTES} bytes"
    if (
        response.content_length is not None
        and hdrs.CONTENT_ENCODING not in response.headers
        and response.content_length > MAX_KEY_SET_BYTES
    ):
        raise KeySetUnavailable(too_large)
    chunks: list[bytes] = []
    size = 0
    while chunk := await response.content.read(_CHUNK):
        size += len(chunk)
        if size > MAX_KEY_SET_BYTES:
            raise KeySetUnavailable(too_large)
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch_key_set(
    session: aiohttp.ClientSession, url: str, timeout_s: float, networks: Sequence[Network] = ()
) -> list[JSON]:
    """GET the JWK set at ``url`` (no redirects) and return its keys."""
    try:
        check_call_url(url, networks)
        async with (
            asyncio.timeout(timeout_s),
            session.get(url, headers={"Accept": "application/json"}, allow_redirects=False) as r,
        ):
            if not 200 <= r.status < 300:
                raise KeySetUnavailable(f"the key set at {url} answered HTTP {r.status}")
            raw = await _read_capped(r)
    except TimeoutError:
        raise KeySetUnavailable(f"the key set at {url} did not answer in time") from None
    except AddressRefused as exc:
        raise KeySetUnavailable(f"the key set's address is refused ({exc})") from None
    except aiohttp.ClientError as exc:
        reason = refused_reason(exc)
        why = f"its address is refused ({reason})" if reason else type(exc).__name__
        raise KeySetUnavailable(f"the key set at {url} could not be fetched: {why}") from None
    try:
        document = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise KeySetUnavailable(f"the key set at {url} is not JSON") from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise KeySetUnavailable(f"the key set at {url} has no 'keys' list")
    return [key for key in keys if isinstance(key, dict)]


class KeySets:
    """The JWK sets of one process, each kept a while after it was fetched."""

    def __init__(
        self,
        kept_s: float = KEPT_S,
        refetch_s: float = REFETCH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kept_s = kept_s
        self.refetch_s = refetch_s
        self.clock = clock
        self._sets: dict[str, _Fetched] = {}

    def _fresh(self, fetched: _Fetched | None, kid: str | None) -> bool:
        if fetched is None:
            return False
        age = self.clock() - fetched.at
        if age > self.kept_s:
            return False
        return kid is None or kid in fetched.kids() or age < self.refetch_s

    async def keys(
        self,
        session: aiohttp.ClientSession,
        url: str,
        kid: str | None,
        timeout_s: float,
        networks: Sequence[Network] = (),
    ) -> list[JSON]:
        """The keys of the set at ``url`` with ``kid`` (every key when ``kid`` is None)."""
        fetched = self._sets.get(url)
        if not self._fresh(fetched, kid):
            keys = await fetch_key_set(session, url, timeout_s, networks)
            if len(self._sets) >= SETS_KEPT:
                self._sets.clear()
            fetched = self._sets[url] = _Fetched(tuple(keys), self.clock())
        assert fetched is not None
        return fetched.matching(kid)
