"""The layering contracts (pyproject.toml's [tool.importlinter], checked by ``lint-imports`` in
.ci/run) cover every module: a new engine module must be named in the engine contract, or it
could import the API, the dashboard or tracking unchecked. Tracking reaches the engine through
its public face only: the names of ``jobsapp.__all__`` and the public modules the package's
docstring lists, each of which imports."""

import importlib
import re
import tomllib
from pathlib import Path

import jobsapp

ROOT = Path(__file__).resolve().parents[2]

#: The edges: they may import the engine and each other; the engine never imports them.
EDGES = {"jobsapp.api", "jobsapp.dashboard", "jobsapp.login", "jobsapp.management", "jobsapp.celery", "jobsapp.django_tasks"}
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
        importlib.import_module(module)
    assert missing == []
    assert jobsapp.DeadReason.POISON == "poison" and jobsapp.RequeueReason.SHUTDOWN == "shutdown"
