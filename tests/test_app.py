"""The application shell: health, readiness, routing errors, and errors as problem+json."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urljoin

import aiohttp
import msgspec
import pytest
from starlette.requests import Request
from starlette.responses import Response as StarletteResponse

from a2a_continue.app import ROUTES, create_app
from a2a_continue.http.routes import ApiRoute, Operation
from a2a_continue.settings import Settings, SettingsError
from tests.support.client import Client, Response, register, token
from tests.support.servers import serve_asgi

PROBLEM = "application/problem+json"


def assert_problem(r: Response, status: int) -> dict[str, Any]:
    assert r.status == status, r.raw
    assert r.headers["Content-Type"] == PROBLEM
    body: dict[str, Any] = r.json()
    assert body["status"] == status
    assert body["type"].startswith("urn:a2a-continue:problem:")
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    return body


# ---- health and readiness -----------------------------------------------------------------


async def test_healthz_answers_without_a_token(client: Client) -> None:
    r = await client.call("GET", "/healthz", bearer=None)
    assert r.status == 200, r.raw
    assert r.json() == {"status": "ok"}


async def test_readyz_answers_200_when_the_database_is_up(client: Client) -> None:
    r = await client.call("GET", "/readyz", bearer=None)
    assert r.status == 200, r.raw
    assert r.json() == {"status": "ready"}


async def test_readyz_answers_503_with_retry_after_when_the_database_is_down(
    settings: Settings,
) -> None:
    down = msgspec.structs.replace(settings, database_url="postgresql://postgres@127.0.0.1:1/x")
    async with serve_asgi(create_app(down)) as base, aiohttp.ClientSession() as session:
        client = Client(base, session)
        r = await client.call("GET", "/readyz", bearer=None)
        body = assert_problem(r, 503)
        assert r.headers["Retry-After"].isdigit()
        assert "127.0.0.1:1" not in body["detail"]
        assert (await client.call("GET", "/healthz", bearer=None)).status == 200
        assert_problem(await client.call("GET", "/v1/a2a/agents"), 503)


# ---- routing errors -----------------------------------------------------------------------


UNKNOWN_PATHS = ["/v1/a2a", "/v1/a2a/agents/x/y", "/v2/a2a/agents", "/nowhere", "/docs/a/b"]


@pytest.mark.parametrize("path", UNKNOWN_PATHS)
async def test_unknown_path_is_404_problem(client: Client, path: str) -> None:
    assert_problem(await client.call("GET", path), 404)


@pytest.mark.parametrize("path", UNKNOWN_PATHS)
async def test_unknown_path_is_404_without_a_token_too(client: Client, path: str) -> None:
    r = await client.call("GET", path, bearer=None)
    body = assert_problem(r, 404)
    assert "WWW-Authenticate" not in r.headers
    assert body["detail"] == f"no route matches {path}"


async def test_wrong_method_is_405_without_a_token_too(client: Client) -> None:
    r = await client.call("PUT", "/v1/a2a/agents", bearer=None)
    assert_problem(r, 405)
    assert {m.strip() for m in r.headers["Allow"].split(",")} - {"HEAD"} == {"GET", "POST"}


@pytest.mark.parametrize("path", ["/", "/docs/"])
async def test_the_root_and_docs_with_a_slash_lead_a_browser_to_the_docs_page(
    client: Client, path: str
) -> None:
    async with client.session.get(client.base + path, allow_redirects=False) as r:
        assert r.status == 307
        target = urljoin(client.base + path, r.headers["Location"])
    assert target == client.base + "/docs"
    page = await client.call("GET", path, bearer=None)  # followed, as a browser does
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")


MALFORMED_IDS = [
    ("GET", "/v1/a2a/agents/xyz"),
    ("POST", "/v1/a2a/xyz/messages"),
    ("GET", "/v1/a2a/xyz/tasks/t1/events"),
    ("GET", "/a2a/xyz/.well-known/agent-card.json"),
    ("POST", "/a2a/xyz"),
]


@pytest.mark.parametrize(("method", "path"), MALFORMED_IDS)
async def test_a_malformed_agent_id_still_needs_the_token(
    client: Client, method: str, path: str
) -> None:
    assert_problem(await client.call(method, path, {"text": "hi"}, bearer=None), 401)


@pytest.mark.parametrize(("method", "path"), MALFORMED_IDS)
async def test_a_malformed_agent_id_is_404_saying_agent_ids_are_uuids(
    client: Client, method: str, path: str
) -> None:
    body = assert_problem(await client.call(method, path, {"text": "hi"}), 404)
    assert body["detail"] == "no agent with id 'xyz' (agent ids are UUIDs)"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/a2a/agents/not-a-uuid"),
        ("PATCH", "/v1/a2a/agents/123"),
        ("DELETE", "/v1/a2a/agents/not-a-uuid"),
        ("POST", "/v1/a2a/not-a-uuid/messages"),
        ("GET", "/v1/a2a/not-a-uuid/tasks"),
        ("GET", "/v1/a2a/not-a-uuid/tasks/t1"),
        ("POST", "/v1/a2a/not-a-uuid/tasks/t1/messages"),
        ("POST", "/v1/a2a/not-a-uuid/tasks/t1/cancel"),
    ],
)
async def test_malformed_agent_id_in_path_is_404(client: Client, method: str, path: str) -> None:
    assert_problem(await client.call(method, path, {"text": "hi"}), 404)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/v1/a2a/agents", {"GET", "POST"}),
        ("DELETE", "/v1/a2a/agents", {"GET", "POST"}),
        ("POST", f"/v1/a2a/agents/{uuid.uuid4()}", {"GET", "PATCH", "DELETE"}),
        ("POST", "/v1/a2a/agents/not-a-uuid", {"GET", "PATCH", "DELETE"}),
        ("GET", f"/v1/a2a/{uuid.uuid4()}/messages", {"POST"}),
        ("GET", f"/v1/a2a/{uuid.uuid4()}/tasks/t1/cancel", {"POST"}),
        ("POST", "/healthz", {"GET"}),
    ],
)
async def test_wrong_method_is_405_with_allow(
    client: Client, method: str, path: str, allowed: set[str]
) -> None:
    r = await client.call(method, path)
    assert_problem(r, 405)
    listed = {m.strip() for m in r.headers["Allow"].split(",")}
    assert listed - {"HEAD"} == allowed


# ---- every error is problem+json ----------------------------------------------------------


async def test_errors_of_every_kind_are_problem_json(client: Client) -> None:
    agent = str(uuid.uuid4())
    cases = [
        (401, "GET", "/v1/a2a/agents", None, None),
        (403, "GET", "/v1/a2a/agents", None, token(perms=["a2a.invoke"])),
        (404, "GET", f"/v1/a2a/agents/{agent}", None, ""),
        (405, "PUT", "/v1/a2a/agents", None, ""),
        (422, "POST", "/v1/a2a/agents", {"name": ""}, ""),
        (422, "GET", "/v1/a2a/agents?limit=0", None, ""),
    ]
    for status, method, path, body, bearer in cases:
        assert_problem(await client.call(method, path, body, bearer=bearer), status)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/a2a/agents?limit=abc", "limit"),
        ("/v1/a2a/{agent}/tasks?state=sleeping", "state"),
        ("/v1/a2a/{agent}/tasks/T1?refresh=maybe", "refresh"),
        ("/v1/a2a/{agent}/tasks/T1/events?after=two", "after"),
    ],
)
async def test_a_bad_query_value_is_422_naming_the_query_parameter(
    client: Client, path: str, name: str
) -> None:
    agent = await register(client, "http://127.0.0.1:9/")
    body = assert_problem(await client.call("GET", path.format(agent=agent)), 422)
    assert body["title"] == "Invalid query parameter"
    assert body["type"] == "urn:a2a-continue:problem:invalid-query"
    assert body["detail"].startswith(f"query parameter {name!r} ")
    assert [e["loc"] for e in body["errors"]] == [f"$.query.{name}"]


async def test_payload_too_large_is_413_problem(client: Client, settings: Settings) -> None:
    big = b'{"name": "' + b"x" * settings.max_body_bytes + b'"}'
    r = await client.call(
        "POST", "/v1/a2a/agents", data=big, headers={"Content-Type": "application/json"}
    )
    assert_problem(r, 413)


async def boom(request: Request) -> StarletteResponse:
    raise RuntimeError("internal detail: password=hunter2 at /srv/secret.py")


BOOM = ApiRoute("GET", "/v1/a2a/boom", boom, "a2a.read", Operation("Fail"))


async def test_unexpected_error_is_500_problem_without_details(settings: Settings) -> None:
    app = create_app(settings, routes=[*ROUTES, BOOM])
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        r = await Client(base, session).call("GET", "/v1/a2a/boom")
    assert_problem(r, 500)
    assert b"hunter2" not in r.raw
    assert b"RuntimeError" not in r.raw
    assert b"secret.py" not in r.raw


def test_create_app_refuses_a_jwt_secret_shorter_than_32_bytes(settings: Settings) -> None:
    short = msgspec.structs.replace(settings, jwt_secret="s" * 31)
    with pytest.raises(SettingsError, match="at least 32 bytes"):
        create_app(short)
    create_app(msgspec.structs.replace(settings, jwt_secret="s" * 32))


async def hello(request: Request) -> StarletteResponse:
    """Greet the caller."""
    return StarletteResponse("hello")


HELLO = ApiRoute("GET", "/v1/a2a/hello/{agent_id:uuid}", hello, "a2a.hello", Operation("Say hi"))


async def test_a_route_added_to_the_table_alone_is_routed_checked_and_documented(
    settings: Settings,
) -> None:
    app = create_app(settings, routes=[*ROUTES, HELLO])
    path = f"/v1/a2a/hello/{uuid.uuid4()}"
    async with serve_asgi(app) as base, aiohttp.ClientSession() as session:
        client = Client(base, session, token(perms=["a2a.hello"]))
        answered = await client.call("GET", path)
        without_permission = await client.call("GET", path, bearer=token(perms=["a2a.read"]))
        without_token = await client.call("GET", path, bearer=None)
        document = (await client.call("GET", "/openapi.json", bearer=None)).json()
    assert (answered.status, answered.raw) == (200, b"hello")
    assert_problem(without_permission, 403)
    assert_problem(without_token, 401)
    operation = document["paths"]["/v1/a2a/hello/{agent_id}"]["get"]
    assert operation["summary"] == "Say hi"
    assert operation["x-permission"] == "a2a.hello"
    assert operation["description"] == "Greet the caller.\n\nNeeds permission `a2a.hello`."


def test_a_push_signing_key_that_cannot_sign_stops_the_start(settings: Settings) -> None:
    bad = msgspec.structs.replace(settings, push_signing_key="not a PEM key")
    with pytest.raises(ValueError, match="A2AC_PUSH_SIGNING_KEY"):
        create_app(bad)
