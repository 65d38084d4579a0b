"""Ports Celery's integration suite (``t/integration/`` of the pinned sdist) onto ``jobsapp.celery``.

The upstream files are never kept in this repository: ``port(source, destination)`` reads them
from the extracted sdist at test time and writes the ported copies into ``destination`` (the
git-ignored ``ported/`` package beside this file). Only import lines change, each by one rule
below; a test body, a task body or a fixture body is never edited. A rule that matches no line
of a file it names is an error (the upstream file changed: review the rules), and so is a line
changed by a rule that is not an import.

What the rules do:
- ``celery`` becomes ``jobsapp.celery`` (the project's mirror of Celery's module paths);
- ``billiard`` (Celery's fork of multiprocessing) becomes the standard library's;
- the suite's own ``conftest`` (Celery's session app and worker) becomes ``harness``: our
  fixtures, which start the engine's worker in the test process on the test Redis.

The files keep their places in the sdist (``ported/t/integration/tasks.py``, ``ported/t/canvas_helpers.py``)
and ``ported/`` is the root of their import path (``importable()``; pytest adds it when it collects
the tests, as ``ported/`` is no package), so the tasks are named as in Celery's suite
(``t.integration.tasks.add``) and the suite's own imports (``from .tasks``, ``from t.canvas_helpers``)
stay as they are.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: Where the ported files go (git-ignored): the root of their import path, not a package.
PORTED = Path(__file__).resolve().parent / "ported"

#: The upstream files the suite runs: their paths inside the sdist, which are also their paths in ``PORTED``.
FILES = ("t/integration/tasks.py", "t/integration/test_tasks.py", "t/integration/test_canvas.py", "t/canvas_helpers.py")

#: The packages of ``FILES`` (their ``__init__.py``, empty in the sdist, written by ``port``).
PACKAGES = ("t", "t/integration")


@dataclass(frozen=True)
class Rule:
    """Replace ``pattern`` (a regular expression matched on one import line) by ``replacement``."""

    pattern: str
    replacement: str
    files: tuple[str, ...]  # the ported file names this rule must change at least once


RULES = (
    Rule(r"^import billiard as multiprocessing$", "import multiprocessing", ("test_tasks.py",)),
    Rule(r"^import celery$", "import jobsapp.celery as celery", ("test_tasks.py",)),
    Rule(r"^from celery(\.[\w.]+)? import ", r"from jobsapp.celery\1 import ", ("tasks.py", "test_tasks.py", "test_canvas.py")),
    Rule(r"^(\s+)from celery(\.[\w.]+)? import ", r"\1from jobsapp.celery\2 import ", ("tasks.py", "test_canvas.py")),
    Rule(r"^from \.conftest import ", "from tests.conformance.celery_integration.harness import ", ("test_tasks.py", "test_canvas.py")),
)

#: A line a rule may change: an import statement (possibly indented, as inside a function).
IMPORT_LINE = re.compile(r"^\s*(from\s+\S+\s+import\s|import\s)")


class PortError(RuntimeError):
    """The upstream files no longer match the rules (a new Celery version): review port.py."""


def port_text(name: str, text: str) -> str:
    """The ported text of upstream file ``name`` (its name in the package)."""
    lines = text.splitlines(keepends=True)
    used = {rule: 0 for rule in RULES}
    for index, line in enumerate(lines):
        for rule in RULES:
            if name not in rule.files:
                continue
            changed = re.sub(rule.pattern, rule.replacement, line)
            if changed != line:
                if not IMPORT_LINE.match(line):
                    raise PortError(f"{name}:{index + 1}: rule {rule.pattern!r} would change a line that is not an import: {line!r}")
                used[rule] += 1
                lines[index] = line = changed
    for rule, count in used.items():
        if name in rule.files and count == 0:
            raise PortError(f"{name}: rule {rule.pattern!r} matched no line: the upstream file changed")
    return "".join(lines)


def port(source: Path, destination: Path = PORTED) -> Path:
    """Write the ported files into ``destination`` from the sdist's root ``source``. A file whose
    ported text is already there is left alone, and one that changes is replaced atomically, so
    several test runs may start at once (CI runs the canvas tests beside the main suite); a file
    the port does not make (an older layout's) is removed."""
    wanted: dict[Path, str] = {}
    for package in PACKAGES:
        wanted[destination / package / "__init__.py"] = '"""Ported at test time by celery_integration/port.py (not kept in git)."""\n'
    for path in FILES:
        wanted[destination / path] = port_text(Path(path).name, (source / path).read_text(encoding="utf-8"))
    if destination.exists():
        for stale in destination.rglob("*.py"):
            if stale not in wanted:
                stale.unlink(missing_ok=True)
    for target, text in wanted.items():
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.{os.getpid()}")
        staged.write_text(text, encoding="utf-8")
        os.replace(staged, target)
    return destination


def importable(root: Path = PORTED) -> None:
    """Put the ported files' root on the import path (the worker process's way to ``t.integration.tasks``)."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
