"""The JWK sets cards are checked with: fetched within bounds through the address guard, kept
per URL, refetched for an unknown kid at most once a while."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from a2a_continue.a2a.key_sets import MAX_KEY_SET_BYTES, KeySets, KeySetUnavailable
from tests.support.servers import serve_aiohttp

JSON = dict[str, Any]
KEY = {"kty": "EC", "crv": "P-256", "x": "x", "y": "y", "kid": "k1"}


@dataclass
class Served:
    base: str = ""
    keys: list[JSON] = field(default_factory=lambda: [KEY])
    asked: int = 0


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    state = Served()

    async def keys(_: web.Request) -> web.StreamResponse:
        state.asked += 1
        return web.json_response({"keys": state.keys})

    async def large(_: web.Request) -> web.StreamResponse:
        return web.Response(body=b" " * (MAX_KEY_SET_BYTES + 1), content_type="application/json")

    async def moved(_: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(state.base + "/keys.json")

    app = web.Application()
    app.router.add_get("/keys.json", keys)
    app.router.add_get("/large.json", large)
    app.router.add_get("/moved.json", moved)
    async with serve_aiohttp(app) as base:
        state.base = base
        yield state


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_set_is_fetched_once_and_looked_up_by_kid(
    session: aiohttp.ClientSession, served: Served
) -> None:
    sets = KeySets()
    url = served.base + "/keys.json"
    assert await sets.keys(session, url, "k1", 5.0) == [KEY]
    assert await sets.keys(session, url, "k1", 5.0) == [KEY]
    assert served.asked == 1


async def test_an_unknown_kid_refetches_at_most_once_a_while(
    session: aiohttp.ClientSession, served: Served
) -> None:
    clock = Clock()
    sets = KeySets(kept_s=600, refetch_s=30, clock=clock)
    url = served.base + "/keys.json"
    await sets.keys(session, url, "k1", 5.0)
    assert await sets.keys(session, url, "k2", 5.0) == []
    assert served.asked == 1  # within the refetch window
    served.keys = [KEY, {**KEY, "kid": "k2"}]
    clock.now += 31
    assert [k["kid"] for k in await sets.keys(session, url, "k2", 5.0)] == ["k2"]
    assert served.asked == 2


async def test_a_kept_set_is_fetched_again_once_it_is_old(
    session: aiohttp.ClientSession, served: Served
) -> None:
    clock = Clock()
    sets = KeySets(kept_s=600, refetch_s=30, clock=clock)
    url = served.base + "/keys.json"
    await sets.keys(session, url, "k1", 5.0)
    clock.now += 601
    await sets.keys(session, url, "k1", 5.0)
    assert served.asked == 2


@pytest.mark.parametrize(
    ("path", "said"),
    [("/large.json", "larger than"), ("/moved.json", "HTTP 302"), ("/missing.json", "HTTP 404")],
    ids=["too-large", "redirect-not-followed", "not-found"],
)
async def test_a_set_that_cannot_be_had_within_bounds_is_unavailable(
    session: aiohttp.ClientSession, served: Served, path: str, said: str
) -> None:
    with pytest.raises(KeySetUnavailable, match=said):
        await KeySets().keys(session, served.base + path, "k1", 5.0)
    assert served.asked == 0


async def test_a_set_at_a_refused_address_is_unavailable_without_a_connection() -> None:
    tried: list[str] = []

    class Recording(aiohttp.TCPConnector):
        async def connect(self, req: Any, *args: Any, **kwargs: Any) -> Any:
            tried.append(str(req.url))
            raise AssertionError("the guard let a refused address through")

    async with aiohttp.ClientSession(connector=Recording()) as recording:
        with pytest.raises(KeySetUnavailable, match="refused"):
            await KeySets().keys(recording, "http://169.254.169.254/keys.json", "k1", 5.0)
    assert tried == []
