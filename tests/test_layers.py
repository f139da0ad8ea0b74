"""The package's layers: folders import only downward, no module imports itself in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "a2a_continue"

# Each layer may import its own modules and those of the layers below it (a lower number).
LAYERS = {
    "settings": 0,
    "errors": 0,
    "limits": 0,
    "obs": 1,
    "a2a": 2,
    "runtime": 3,
    "core": 4,
    "background": 5,
    "http": 6,
    "facade": 7,
    "app": 8,
    "ops": 9,
    "cli": 10,
    "__main__": 10,
}
MAX_TOP_LEVEL_MODULES = 8
MAX_MODULE_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(("a2a_continue", *parts))] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every package module ``name`` imports, lazy and TYPE_CHECKING imports included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}: the package imports absolutely"
            base = node.module or ""
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name and target != "a2a_continue":
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int:
    parts = name.split(".")
    return LAYERS[parts[1]] if len(parts) > 1 else 0


def test_every_module_belongs_to_a_layer() -> None:
    assert [n for n in MODULES if n != "a2a_continue" and n.split(".")[1] not in LAYERS] == []


def test_no_module_imports_one_from_a_layer_above_it() -> None:
    upward = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in sorted(targets)
        if name != "a2a_continue" and _layer(target) > _layer(name)
    ]
    assert upward == []


def test_no_import_circles() -> None:
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for target in sorted(GRAPH[name]):
            if state.get(target) == 1:
                circles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)
    assert circles == []


def test_the_top_level_holds_few_modules() -> None:
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_no_module_is_longer_than_one_sitting() -> None:
    long = {n: len(p.read_text().splitlines()) for n, p in MODULES.items()}
    assert {n: lines for n, lines in long.items() if lines > MAX_MODULE_LINES} == {}
