"""The a2a-sdk snippet of docs/facade.md runs as written against an agent behind the gateway."""

from __future__ import annotations

import re
import shlex
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from tests.support.client import Client, register, token
from tests.support.sdk_agent import SdkAgent

FACADE_DOC = Path(__file__).resolve().parents[2] / "docs" / "facade.md"


def snippet() -> str:
    section = FACADE_DOC.read_text().split("## A2A clients", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_the_facade_doc_snippet_completes_a_task_through_the_gateway(
    client: Client, gateway_url: str, sdk: SdkAgent, version: str
) -> None:
    agent_id = await register(client, sdk.url, version)
    namespace: dict[str, Any] = {}
    exec(compile(snippet(), str(FACADE_DOC), "exec"), namespace)  # our own docs
    answer = await namespace["ask_weather"](gateway_url, agent_id, token())
    assert answer == "Sunny in Paris"
    tasks = (await client.call("GET", f"/v1/a2a/{agent_id}/tasks")).json()["tasks"]
    assert [t["state"] for t in tasks] == ["completed"]


def test_the_facade_doc_names_the_client_to_install_that_the_snippet_runs_with() -> None:
    section = FACADE_DOC.read_text().split("## A2A clients", 1)[1]
    match = re.search(r"^pip install (.+)$", section, re.M)
    assert match is not None
    (line,) = shlex.split(match.group(1))
    wanted = Requirement(line)
    assert wanted.name == "a2a-sdk"
    assert wanted.specifier.contains(metadata.version("a2a-sdk"))
    assert not wanted.specifier.contains("0.3.0") and not wanted.specifier.contains("2.0.0")
