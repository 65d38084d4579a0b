"""The layering contracts (pyproject.toml's [tool.importlinter], checked by ``lint-imports`` in
.ci/run) cover every module: each module of ``jobsapp`` and of ``jobsapp.worker`` sits in one layer
of its package's contract, so a new module cannot import upward unchecked. The operators' API and
the worker are independent siblings. Tracking reaches the engine through its public face only: the
names of ``jobsapp.__all__`` and the public modules the package's docstring lists, each of which
imports."""

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
