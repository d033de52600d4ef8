"""The house rules, checked on the source: imports run one way, files and functions stay small.

Read from the AST of every module of the packages (``plancast/`` and the folders it maps:
simulator, traces, runtime, dashboard), never by importing them. Tests are not measured.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("simulator", "traces", "runtime", "dashboard")
"""Folders installed as ``plancast.<folder>`` (pyproject.toml package-dir)."""
MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 60

# Violations in files other helpers own right now, each with the reason; the lead shrinks this list
# after merging their branches. The rule itself never changes: an entry names one file or function.
ALLOWED_LONG_FILES: dict[str, str] = {}
ALLOWED_LONG_FUNCTIONS: dict[str, str] = {
}


def package_files() -> Iterator[tuple[str, Path]]:
    """(module name, file) of every module of the packages; plancast/<folder> symlinks are skipped."""
    for path in sorted((ROOT / "plancast").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[1] not in PACKAGES:
            yield _module_name(relative.with_suffix("").parts), path
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = ("plancast", *path.relative_to(ROOT).with_suffix("").parts)
            yield _module_name(parts), path


def _module_name(parts: tuple[str, ...]) -> str:
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The plancast modules an import statement loads (``from a import b``: ``a.b`` if a module)."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names if a.name in known)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the package this module is in
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
        for alias in node.names:
            yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


def _imports(tree: ast.Module) -> Iterator[ast.AST]:
    """Every import that can run, deferred ones inside functions included (a circle closed by a late
    import is still a circle); ``if TYPE_CHECKING:`` blocks never run and are left out."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    files = dict(package_files())
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        graph[module] = {
            target
            for node in _imports(tree)
            for target in _imported(node, module, is_package, known)
            if target in known and target != module
        }
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_the_import_graph_sees_the_packages() -> None:
    graph = import_graph()
    assert "plancast.runtime.instrument.recorder" in graph
    assert "plancast.simulator.scenario" in graph["plancast.simulator.validation"]
    assert "plancast.traces.schema" in graph["plancast.runtime.instrument.keys"]


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_find_cycle_reports_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_file_over_the_limit() -> None:
    long = {
        _relative(p): n
        for _, p in package_files()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES
    }
    unexpected = {f: n for f, n in long.items() if f not in ALLOWED_LONG_FILES}
    assert not unexpected, f"files over {MAX_FILE_LINES} lines (split them): {unexpected}"
    stale = sorted(set(ALLOWED_LONG_FILES) - set(long))
    assert not stale, f"within the limit now; remove from ALLOWED_LONG_FILES: {stale}"


def test_no_function_over_the_limit() -> None:
    long = {}
    for _, path in package_files():
        for fn in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            lines = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                long[f"{_relative(path)}::{fn.name}"] = lines
    unexpected = {f: n for f, n in long.items() if f not in ALLOWED_LONG_FUNCTIONS}
    assert not unexpected, f"functions over {MAX_FUNCTION_LINES} lines (split them): {unexpected}"
    stale = sorted(set(ALLOWED_LONG_FUNCTIONS) - set(long))
    assert not stale, f"within the limit now; remove from ALLOWED_LONG_FUNCTIONS: {stale}"

