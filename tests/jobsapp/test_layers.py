"""The layering contracts (pyproject.toml's [tool.importlinter], checked by ``lint-imports`` in
.ci/run) cover every module: a new engine module must be named in the engine contract, or it
could import the API, the dashboard or tracking unchecked."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The edges: they may import the engine and each other; the engine never imports them.
EDGES = {"jobsapp.api", "jobsapp.dashboard", "jobsapp.management", "jobsapp.celery", "jobsapp.django_tasks"}
#: Neither engine nor edge: the package's public API, Django glue and test helpers for users.
OTHERS = {"jobsapp", "jobsapp.urls", "jobsapp.templatetags", "jobsapp.testing", "jobsapp.pytest_plugin", "jobsapp.migrations"}


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def top_level_modules() -> set[str]:
    package = ROOT / "jobsapp"
    names = {f"jobsapp.{path.stem}" for path in package.glob("*.py") if path.stem != "__init__"}
    names |= {f"jobsapp.{path.parent.name}" for path in package.glob("*/__init__.py")}
    return names | {"jobsapp"}


def test_every_jobsapp_module_is_engine_or_edge():
    # Given the engine contract's sources and the edges it forbids
    engine_contract = next(contract for contract in contracts() if contract["name"].startswith("The engine never imports"))
    engine = set(engine_contract["source_modules"])
    forbidden = set(engine_contract["forbidden_modules"])
    # When every top-level module of jobsapp is classified
    unclassified = top_level_modules() - engine - EDGES - OTHERS
    # Then none is left out, and the edges are exactly what the engine may not import
    assert unclassified == set(), f"add these to the engine contract in pyproject.toml (or to the edges): {sorted(unclassified)}"
    assert EDGES <= forbidden
    assert not (engine & EDGES)
