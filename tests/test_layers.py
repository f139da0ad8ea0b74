"""The package's layers: folders import only downward, no module imports itself in a circle;
core/ is a few packages by concern, each the one writer of its tables, and no statement on a
table lives outside core/ (a probe naming no table, such as ``SELECT 1``, may)."""

from __future__ import annotations

import ast
import re
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


# ---- core/: a few packages by concern, each the one writer of its tables ---------------------

CORE = PACKAGE / "core"
MAX_CORE_PARTS = 10
# A statement that writes a table, wherever in a string (a CTE's part included).
_WRITES = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(a2a_\w+)")
# A statement of any kind on the gateway's tables, or on the schema's record.
_STATEMENT = re.compile(
    r"\b(?:SELECT|INSERT\s+INTO|UPDATE|DELETE\s+FROM|WITH)\b[\s\S]*\b(?:a2a_\w+|schema_migrations)\b"
)


def _strings(path: Path) -> list[str]:
    """The literal text of every string in a module (an f-string's fixed parts joined)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            found.append("".join(v.value for v in node.values if isinstance(v, ast.Constant)))
    return found


def _core_part(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "core" else None


def test_core_is_a_few_packages_by_concern() -> None:
    parts = [p.name for p in CORE.iterdir() if p.name != "__init__.py" and p.name != "__pycache__"]
    assert len(parts) <= MAX_CORE_PARTS, sorted(parts)


def test_the_core_packages_import_each_other_without_circles() -> None:
    graph: dict[str, set[str]] = {}
    for name, targets in GRAPH.items():
        part = _core_part(name)
        if part is not None:
            graph.setdefault(part, set()).update(
                t for t in map(_core_part, targets) if t is not None and t != part
            )
    circles = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            part = todo.pop()
            if part == start:
                circles.append(start)
                break
            if part not in seen:
                seen.add(part)
                todo.extend(graph.get(part, ()))
    assert circles == [], graph


def test_every_table_is_written_from_one_core_package() -> None:
    writers: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        for text in _strings(path):
            for table in _WRITES.findall(text):
                writers.setdefault(table, set()).add(_core_part(name) or name)
    assert {t: sorted(w) for t, w in writers.items() if len(w) > 1} == {}


def test_no_statement_lives_outside_core() -> None:
    outside = [
        f"{name}: {text.split()[0]} …"
        for name, path in MODULES.items()
        if _core_part(name) is None
        for text in _strings(path)
        if _STATEMENT.search(text)
    ]
    assert outside == []
