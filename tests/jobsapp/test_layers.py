"""The layering contracts (pyproject.toml's [tool.importlinter], checked by ``lint-imports`` in
.ci/run) cover every module: each module of ``jobsapp`` and of ``jobsapp.worker`` sits in one layer
of its package's contract, so a new module cannot import upward unchecked. The operators' API and
the worker are independent siblings. Tracking reaches the engine through its public face only: the
names of ``jobsapp.__all__`` and the public modules the package's docstring lists, each of which
imports."""

import ast
import importlib
import re
import tomllib
from pathlib import Path

import django

import jobsapp

ROOT = Path(__file__).resolve().parents[2]


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def layers_contract(container: str) -> dict:
    return next(contract for contract in contracts() if contract["type"] == "layers" and contract["containers"] == [container])


def layered(contract: dict) -> list[set[str]]:
    """Each layer's modules (``a : b`` and ``a | b`` siblings alike), top first."""
    return [{name.strip() for name in re.split(r"[:|]", layer)} for layer in contract["layers"]]


def children(package: str) -> set[str]:
    """The modules and subpackages directly inside ``package``."""
    directory = ROOT.joinpath(*package.split("."))
    names = {path.stem for path in directory.glob("*.py") if path.stem != "__init__"}
    return names | {path.parent.name for path in directory.glob("*/__init__.py")}


def test_every_module_of_the_engine_and_the_worker_sits_in_a_layer():
    for container in ("jobsapp", "jobsapp.worker"):
        # Given the layers contract of the package
        contract = layers_contract(container)
        layers = layered(contract)
        # When its modules are looked up in the layers
        placed = set().union(*layers)
        # Then each sits in exactly one, none is missing, and import-linter checks the same
        assert children(container) - placed == set(), f"add these to a layer of {container} in pyproject.toml"
        assert placed - children(container) == set(), "a layer names a module that does not exist"
        assert sum(len(layer) for layer in layers) == len(placed)
        assert contract["exhaustive"] is True


def test_the_worker_sits_beside_the_api_above_the_door_and_below_the_edges():
    # Given the engine's layers
    layers = layered(layers_contract("jobsapp"))
    position = {name: index for index, layer in enumerate(layers) for name in layer}
    # When the worker is placed among them
    worker_layer = next(layer for layer in layers_contract("jobsapp")["layers"] if "worker" in layer)
    # Then the API and the worker may not import each other, the door is below both, and the
    # edges that run jobs in a worker are above it
    assert set(re.split(r"\s*\|\s*", worker_layer.strip())) == {"worker", "api"}
    assert position["worker"] < position["ending"] < position["unique"] < position["payload"]
    assert all(position[edge] < position["worker"] for edge in ("celery", "django_tasks", "testing", "management", "dashboard"))


def documented_public_modules() -> set[str]:
    """The modules jobsapp's docstring names as public (``jobsapp.client``, ...)."""
    return set(re.findall(r"``(jobsapp(?:\.[a-z_]+)+)``", jobsapp.__doc__ or ""))


def test_tracking_imports_only_the_public_face():
    # Given the tracking contract, which forbids every jobsapp module but the ones it exempts
    tracking_contract = next(contract for contract in contracts() if contract["name"].startswith("Tracking uses only"))
    assert tracking_contract["forbidden_modules"] == ["jobsapp.*"]
    # When its exemptions are read
    exempted = {rule.split(" -> ")[1] for rule in tracking_contract["ignore_imports"]}
    # Then each is a module jobsapp documents as public (the rest of the face is jobsapp.__all__)
    assert exempted <= documented_public_modules(), sorted(exempted - documented_public_modules())
    assert all(rule.startswith("tracking.** -> ") for rule in tracking_contract["ignore_imports"])


def test_every_documented_public_path_imports():
    # Given the public modules jobsapp documents, and the names of its __all__
    public_modules = documented_public_modules()
    assert {"jobsapp.client", "jobsapp.api", "jobsapp.results", "jobsapp.limiter", "jobsapp.batch"} <= public_modules
    # When each is imported, and each name looked up on the package
    missing = [name for name in jobsapp.__all__ if not hasattr(jobsapp, name)]
    # Then every path resolves: users' imports and tracking's keep working
    for module in sorted(public_modules):
        if module == "jobsapp.django_tasks" and django.VERSION < (6, 0):
            continue  # django.tasks is Django 6.0's: on 5.2 importing it raises an ImportError that says so
        importlib.import_module(module)
    assert missing == []
    assert jobsapp.DeadReason.POISON == "poison" and jobsapp.RequeueReason.SHUTDOWN == "shutdown"
    assert not any(module.startswith("jobsapp.worker") for module in public_modules)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """Every module of ``modules`` that ``path`` imports anywhere: at module level, inside a
    function, or under ``TYPE_CHECKING`` (import-linter leaves the last out; an annotation that
    names an upper module ties the two all the same)."""
    name = module_name(path)
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = ".".join(part for part in (base if node.level else "", node.module or "") if part)
            found |= {f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names}
    return (found & modules) - {name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = lowest[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                lowest[node] = min(lowest[node], lowest[target])
            elif target in stack:
                lowest[node] = min(lowest[node], index[target])
        if lowest[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_modules_import_each_other_in_a_circle_not_even_for_annotations():
    # Given every module of the engine and of tracking, with every import each one makes
    paths = [path for package in ("jobsapp", "tracking") for path in (ROOT / package).rglob("*.py") if "migrations" not in path.parts]
    modules = {module_name(path) for path in paths}
    graph = {module_name(path): imported_modules(path, modules) for path in paths}
    assert graph["jobsapp.client"] >= {"jobsapp.chains", "jobsapp.registry"}  # the reading sees imports
    assert "jobsapp.job" in graph["jobsapp.middleware"]  # ... under TYPE_CHECKING too
    # When the circles among them are looked for
    found = circles(graph)
    # Then there is none: a module below another names what it needs from a lower one (the producer
    # names a job class through registry.JobClass; tracking's models reach the launcher through their app)
    assert found == []
