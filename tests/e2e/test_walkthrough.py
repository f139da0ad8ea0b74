"""The README walkthrough checker (scripts/walkthrough.py): how it reads steps and answers.

CI runs the script itself on the real README; these tests pin down that it can fail.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def walkthrough() -> ModuleType:
    spec = importlib.util.spec_from_file_location("walkthrough", ROOT / "scripts/walkthrough.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["walkthrough"] = module
    spec.loader.exec_module(module)
    return module


def test_steps_span_continued_and_quoted_lines_and_keep_their_answers(
    walkthrough: ModuleType,
) -> None:
    block = (
        "# a comment\n"
        "X=1\n"
        "f() { echo hi; }\n"
        "curl -s $GW/a \\\n"
        "  -d '{\n"
        '  "a": 1}\'\n'
        '# → 200, {"a": 1}\n'
        "make run\n"
        "# → serving\n"
    )
    steps, functions = walkthrough.parse_steps(block, 10)
    assert functions == ["f() { echo hi; }"]
    assert [s.command.splitlines()[0] for s in steps] == ["X=1", "curl -s $GW/a \\", "make run"]
    assert steps[1].expected == ['200, {"a": 1}']
    assert steps[1].line == 13
    assert steps[0].assigns == "X"
    assert steps[2].is_server


def test_the_readme_walkthrough_starts_the_sample_agent_first(walkthrough: ModuleType) -> None:
    block, line = walkthrough.walkthrough_block((ROOT / "README.md").read_text())
    steps, _ = walkthrough.parse_steps(block, line)
    assert "a2a-continue sample-agent --port 9999" in steps[0].command
    assert steps[1].command == "make run"
    assert sum(len(step.expected) for step in steps) >= 15


HTTP = 'HTTP/1.1 200 OK\r\nA2A-Task-State: completed\r\n\r\n{"a": {"b": [1, 2, {"c": "d"}]}}'


@pytest.mark.parametrize(
    ("expected", "problem"),
    [
        ('200, A2A-Task-State: completed, {"a": {"b": [1, {"c": "d"}]}}', None),
        ('{"a": {"b": ["…", …]}}', None),
        ('{"a": "…", …}', None),
        ("200", None),
        ('201, {"a": "…"}', "status 200, not 201"),
        ('200, A2A-Task-State: failed, {"a": "…"}', "header A2A-Task-State"),
        ('{"a": {"b": [2, 1]}}', "the answer does not match"),
        ('{"a": {"b": [1, 2, {"c": "e"}]}}', "the answer does not match"),
        ('{"z": "…"}', "the answer does not match"),
    ],
)
def test_answers_are_checked_against_what_is_shown(
    walkthrough: ModuleType, expected: str, problem: str | None
) -> None:
    found = walkthrough.check_answer(HTTP, expected)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_a_body_that_is_not_json_fails(walkthrough: ModuleType) -> None:
    assert walkthrough.check_answer("<html>", '{"a": 1}') == "the answer is not JSON"


def test_true_is_not_one(walkthrough: ModuleType) -> None:
    assert walkthrough.check_answer('{"a": 1}', '{"a": true}') == "the answer does not match"
