"""The engine's shape, as the architecture states it: no function over 80 lines (the processor is
admit -> run -> one handler per outcome), and no import cycle at run time, imports inside
functions included (a cycle is broken by moving the shared piece down, never by deferring an
import). Read from the source with ``ast``, so each check names what breaks it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "jobsapp"
#: The longest function the engine may have, in lines (its signature and docstring included).
FUNCTION_MAX_LINES = 80


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in ENGINE.rglob("*.py")}


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The jobsapp modules ``node`` (in ``module``) imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) if node.level else node.module
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else str(base) for alias in node.names]
    found = []
    for name in names:
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES and name != module:
            found.append(name)
    return found


def _run_time_imports(module: str) -> set[str]:
    """Every jobsapp module ``module`` imports when it runs: at the top or inside a function,
    not under ``if TYPE_CHECKING:``."""
    imports: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                imports.update(_imported(module, child))
            visit(child)

    visit(ast.parse(MODULES[module].read_text()))
    return imports


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(vertex: str) -> None:
        index[vertex] = low[vertex] = len(index)
        stack.append(vertex)
        for successor in graph[vertex]:
            if successor not in index:
                strong(successor)
                low[vertex] = min(low[vertex], low[successor])
            elif successor in stack:
                low[vertex] = min(low[vertex], index[successor])
        if low[vertex] == index[vertex]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == vertex:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for vertex in graph:
        if vertex not in index:
            strong(vertex)
    return found


def test_no_engine_function_is_longer_than_80_lines():
    # Given every function and method of the engine, When their lengths are measured
    too_long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in MODULES.values()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > FUNCTION_MAX_LINES
    ]
    # Then none is over the limit
    assert too_long == []


def test_no_import_cycle_at_run_time_deferred_imports_included():
    # Given every module of jobsapp (engine and edges) and what each imports when it runs (inside functions too)
    graph = {name: _run_time_imports(name) for name in MODULES}
    # Then no group of modules imports each other in a circle
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
