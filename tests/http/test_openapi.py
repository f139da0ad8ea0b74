"""The API description (/openapi.json) and its docs page (/docs), both without a token."""

from __future__ import annotations

import json
import re
import shlex
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from a2a_continue.app import ROUTES
from a2a_continue.http.docs import ASSETS_DIR
from a2a_continue.http.openapi import (
    PROBLEM_PREFIX,
    build_document,
    openapi_path,
    problem_types,
)
from a2a_continue.http.routes import PUBLIC
from tests.support.agents import register_fake, start
from tests.support.client import Client, token
from tests.support.fakes import StartFake, WeatherFake

JSON = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
# The pages whose curl examples are checked: the README and every page under docs/.
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def document() -> JSON:
    return build_document(ROUTES)


def body_validator(document: JSON, method: str, path: str) -> Draft202012Validator:
    operation = document["paths"][path][method.lower()]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    return Draft202012Validator({**schema, "components": document["components"]})


async def test_openapi_json_is_served_without_a_token_and_is_valid_openapi_3_1(
    client: Client,
) -> None:
    r = await client.call("GET", "/openapi.json", bearer=None)
    assert r.status == 200, r.raw
    assert r.headers["Content-Type"] == "application/json"
    served = r.json()
    assert served["openapi"] == "3.1.0"
    validate(served)


def test_every_route_of_the_permission_table_is_documented_with_its_permission(
    document: JSON,
) -> None:
    for route in ROUTES:
        if route.permission == PUBLIC:
            continue
        operation = document["paths"][openapi_path(route.path)][route.method.lower()]
        assert operation["x-permission"] == route.permission
        assert route.permission in operation["description"]
        assert "security" not in operation  # the document's bearer requirement applies
        assert {"401", "403"} <= set(operation["responses"])
    assert document["security"] == [{"bearer": []}]
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_public_routes_are_documented_without_a_token(document: JSON) -> None:
    for route in ROUTES:
        if route.permission != PUBLIC:
            continue
        operation = document["paths"][openapi_path(route.path)][route.method.lower()]
        assert operation["security"] == []
        # No caller's token is asked for; push-in's 401 is its config's own token.
        assert ("401" in operation["responses"]) == (401 in route.operation.problems)


def test_every_shipped_route_is_in_the_document(document: JSON) -> None:
    documented = {
        (method.upper(), path) for path, item in document["paths"].items() for method in item
    }
    shipped = {(route.method, openapi_path(route.path)) for route in ROUTES}
    assert shipped == documented


def test_request_bodies_and_answers_name_the_wire_types(document: JSON) -> None:
    agents = document["paths"]["/v1/a2a/agents"]["post"]
    assert agents["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AgentCreate"
    }
    assert agents["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AgentOut"
    }
    follow_up = document["paths"]["/v1/a2a/{agent_id}/tasks/{task_id}/messages"]["post"]
    assert "A2A-Task-State" in follow_up["responses"]["200"]["headers"]
    assert {"400", "404", "409", "413", "422", "502", "504", "503"} <= set(follow_up["responses"])
    agent_id = follow_up["parameters"][0]
    assert agent_id == {
        "name": "agent_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "format": "uuid"},
    }


def test_every_problem_type_is_documented(document: JSON) -> None:
    text = json.dumps(document)
    for slugs in problem_types().values():
        for slug in slugs:
            if slug in ("method-not-allowed", "internal-error"):
                continue  # answers of no particular route
            assert PROBLEM_PREFIX + slug in text, slug
    problem = document["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail"} <= set(problem["required"])


def test_a_body_schema_refuses_what_the_gateway_refuses(document: JSON) -> None:
    create = body_validator(document, "POST", "/v1/a2a/agents")
    assert create.is_valid({"cardUrl": "http://agent.example/"})
    assert not create.is_valid({"nmae": "typo", "endpointUrl": "http://a/"})
    assert not create.is_valid({"name": "x", "protocolVersion": "2.0"})
    assert not create.is_valid({"name": "x", "endpointUrl": "http://a/"})
    start = body_validator(document, "POST", "/v1/a2a/{agent_id}/messages")
    assert start.is_valid({"text": "hi", "teamId": "blue"})
    assert not start.is_valid({"teamId": "blue"})
    assert not start.is_valid({"text": "hi", "message": {"parts": [{"text": "hi"}]}})


def documented_requests(page: Path) -> list[tuple[str, str, Any]]:
    """Every curl on a page that sends a body: (method, path, decoded body)."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", page.read_text(), flags=re.S):
        for match in re.finditer(r"curl\b((?:\\\n|'[^']*'|[^'\n])*)", block):
            words = shlex.split(match.group(1).replace("\\\n", " "))
            if "-d" not in words:
                continue
            body = json.loads(words[words.index("-d") + 1])
            method = words[words.index("-X") + 1] if "-X" in words else "POST"
            url = next(w for w in words if w.startswith(("$GW", "http")))
            path = urlsplit(url.replace("$GW", "http://gw")).path
            found.append((method, path, body))
    return found


def all_documented_requests() -> list[tuple[str, str, Any]]:
    """The curl examples with a body of the README and docs/, in page order."""
    return [request for page in DOCS for request in documented_requests(page)]


def template_of(document: JSON, method: str, path: str) -> str:
    for template in document["paths"]:
        pattern = "^" + re.sub(r"{[^}]+}", r"[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in document["paths"][template]:
            return template
    raise AssertionError(f"no documented route for {method} {path}")


def test_the_docs_have_body_examples() -> None:
    methods = {(method, path.rsplit("/", 1)[-1]) for method, path, _ in all_documented_requests()}
    assert ("POST", "agents") in methods
    assert ("POST", "messages") in methods
    for page in ("README.md", "docs/api.md", "docs/operations.md"):
        assert documented_requests(ROOT / page), f"{page} has no curl example with a body"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    all_documented_requests(),
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_each_body_schema_accepts_the_documented_examples(
    document: JSON, method: str, path: str, body: Any
) -> None:
    validator = body_validator(document, method, template_of(document, method, path))
    problems = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(body)]
    assert problems == []


async def test_live_answers_match_their_documented_schemas(client: Client) -> None:
    document = (await client.call("GET", "/openapi.json", bearer=None)).json()
    body = {"name": "w", "endpointUrl": "http://127.0.0.1:9/", "protocolVersion": "1.0"}
    created = await client.call("POST", "/v1/a2a/agents", body)
    listed = await client.call("GET", "/v1/a2a/agents")
    refused = await client.call("POST", "/v1/a2a/agents", {"name": 1})
    for method, path, status, answer in (
        ("post", "/v1/a2a/agents", "201", created),
        ("get", "/v1/a2a/agents", "200", listed),
        ("post", "/v1/a2a/agents", "422", refused),
    ):
        response = document["paths"][path][method]["responses"][status]
        ((_, media),) = response["content"].items()
        schema = {**media["schema"], "components": document["components"]}
        assert answer.status == int(status)
        Draft202012Validator(schema).validate(answer.json())


def request_examples(document: JSON) -> list[tuple[str, str, Any]]:
    """Every documented request body's example: (method, path template, example)."""
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if "requestBody" in operation:
                media = operation["requestBody"]["content"]["application/json"]
                assert "example" in media, f"{method} {path} has no request example"
                found.append((method.upper(), path, media["example"]))
    return found


async def test_every_documented_request_example_is_accepted_as_it_stands(
    client: Client, fake_agent: StartFake
) -> None:
    document = (await client.call("GET", "/openapi.json", bearer=None)).json()
    agent = await register_fake(client, fake_agent, WeatherFake("1.0"))
    examples = request_examples(document)
    assert {(m, p) for m, p, _ in examples} >= {
        ("POST", "/v1/a2a/agents"),
        ("PATCH", "/v1/a2a/agents/{agent_id}"),
        ("POST", "/v1/a2a/{agent_id}/messages"),
        ("POST", "/v1/a2a/{agent_id}/tasks/{task_id}/messages"),
        ("POST", "/v1/a2a/{agent_id}/tasks/{task_id}/cancel"),
        ("POST", "/a2a/{agent_id}"),
    }
    for method, template, example in examples:
        if template.startswith("/v1/a2a/push-in/"):
            continue  # an agent's push needs a config the gateway gave it: test_push_in.py
        ids = {"agent_id": agent.id, "name": "example@example.com"}
        if "{task_id}" in template:
            ids["task_id"] = (await start(client, agent))["id"]  # a fresh one, waiting for input
        caller = client.as_(token(admin=True)) if "/limits/" in template else client  # admins'
        r = await caller.call(method, template.format(**ids), example)
        assert 200 <= r.status < 300, (method, template, r.raw)
        if r.headers["Content-Type"].startswith("text/event-stream"):
            assert b"event: error" not in r.raw, (method, template, r.raw)
        else:
            assert "error" not in r.json(), (method, template, r.raw)  # nor a JSON-RPC refusal


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [v for k, v in attrs if k in ("src", "href") and v]


async def test_docs_page_and_its_assets_load_without_a_token_or_an_outside_url(
    client: Client,
) -> None:
    page = await client.call("GET", "/docs", bearer=None)
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    html = page.raw.decode()
    assert not re.search(r"https?://", html)
    assert '<script src="docs/init.js">' in html  # it renders "openapi.json" (test_docs.py)
    parser = _Links()
    parser.feed(html)
    assert len(parser.links) >= 3
    for link in parser.links:
        url = urljoin(client.base + "/docs", link)
        assert url.startswith(client.base + "/")
        asset = await client.call("GET", url.removeprefix(client.base), bearer=None)
        assert asset.status == 200, link
        assert asset.raw
        if link.endswith(".css"):
            assert not re.search(r"url\(\s*['\"]?(https?:)?//", asset.raw.decode())
    bundle = await client.call("GET", "/docs/swagger-ui-bundle.js", bearer=None)
    assert bundle.headers["Content-Type"].startswith("text/javascript")


def test_the_docs_page_uses_a_swagger_ui_that_renders_openapi_3_1() -> None:
    # Swagger UI before 5 refuses a 3.1 document ("supported: openapi 3.0.n").
    version = ASSETS_DIR.name.removeprefix("swagger-ui-")
    assert int(version.split(".")[0]) >= 5, version


async def test_an_unknown_docs_asset_is_404(client: Client) -> None:
    for name in ("nothing.js", "index.j2", "swagger-ui.js.map"):
        r = await client.call("GET", f"/docs/{name}", bearer=None)
        assert r.status == 404, name
        assert r.headers["Content-Type"] == "application/problem+json"


def test_the_task_list_across_agents_is_described_with_its_filters(document: JSON) -> None:
    operation = document["paths"]["/v1/a2a/tasks"]["get"]
    names = {p["name"] for p in operation["parameters"] if p["in"] == "query"}
    assert names == {"state", "agentId", "contextId", "owner", "limit", "cursor"}
    assert operation["x-permission"] == "a2a.read"
    assert {"200", "403", "422"} <= set(operation["responses"])
