"""Upstream material from the package index: pinned sdists, fetched once, verified, ported at run time.

The conformance suites run other projects' tests, examples and documentation code against this
one. None of that code lives in this repository: it comes from the projects' source
distributions on the package index, each pinned by version and sha256 (``Pin`` below), and is
turned into runnable code at test time by our own port scripts (textual substitutions, checked).

    root = require(DJANGO)                        # the extracted sdist; skips (or fails in CI) if unreachable
    text = port(read(root, "tests/tasks/tasks.py"), [Substitution("from . import", "from x import")],
                origin="django tests/tasks/tasks.py")

Fetching: ``python -m pip download --no-deps --no-binary :all: package==version`` into a temporary
directory inside the cache, the archive's sha256 compared with the pin, then renamed into
``<cache>/<sha256>/``; extraction goes to a temporary directory renamed into place the same way.
An advisory lock (``fcntl.flock`` on ``<cache>/<sha256>.lock``) serialises concurrent test
processes, and the renames mean a reader never sees half a file. The cache is
``$JOBSAPP_UPSTREAM_CACHE``, or ``var/upstream/`` in the repository (gitignored), so a run
downloads each sdist once.

Failure modes, all loud: an archive whose sha256 differs from the pin is ``ChecksumMismatch``
(and is not kept); pip failing (no index, no such version) is ``IndexUnreachable``, which
``require`` turns into a skip with pip's reason, or into a failure when ``CI=true`` (CI reaches
the index, so an unreachable one there is a broken proof, not a reason to be silent); a
substitution that no longer matches the upstream text is ``PortDrift``, so an upstream change can
never turn a port into a silent no-op.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import unittest
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT_DIR = Path(__file__).resolve().parent.parent.parent
CACHE_ENVIRONMENT_VARIABLE = "JOBSAPP_UPSTREAM_CACHE"
DEFAULT_CACHE_DIR = ROOT_DIR / "var" / "upstream"
#: pip's own retries are kept (a flaky network); this bounds one whole download.
DOWNLOAD_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class Pin:
    """One source distribution on the package index: its name, exact version and sha256."""

    package: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


#: Celery's sdist ships t/ (its test suites), examples/ and docs/.
CELERY = Pin("celery", "5.7.0", "6a5dfcf6662287204f009a02002b9e66c83d4105e47ebabdc7079108772fc6f0")
#: Django's sdist ships tests/ (tests/tasks/: django.tasks' own suite). The version the venv runs.
DJANGO = Pin("django", "6.1.3", "b5d2d9e35295065d13b1927b3f19a59bd119f737aa6299def14ccca1ae3c8c0d")
#: django-tasks-rq, the django.tasks backend that runs tasks on an RQ worker; ships tests/tests.py.
DJANGO_TASKS_RQ = Pin("django-tasks-rq", "0.12.0", "84020a65d7b92d867f28d3002b4a6b07514eeda99b880ad91bb041d63e2191e0")

PINS = (CELERY, DJANGO, DJANGO_TASKS_RQ)


class UpstreamError(Exception):
    """Upstream material could not be had as pinned."""


class IndexUnreachable(UpstreamError):
    """pip could not download the sdist (no network, no index, no such version); says pip's reason."""


class ChecksumMismatch(UpstreamError):
    """The downloaded archive is not the pinned one (its sha256 differs)."""


class PortDrift(UpstreamError):
    """A substitution of a port no longer matches the upstream text it was written for."""


def cache_dir() -> Path:
    """Where archives and their extracted trees are kept: ``$JOBSAPP_UPSTREAM_CACHE`` or ``var/upstream``."""
    configured = os.environ.get(CACHE_ENVIRONMENT_VARIABLE)
    return Path(configured) if configured else DEFAULT_CACHE_DIR


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``lock_path`` (created if missing) for the block."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _cached_archive(directory: Path) -> Path | None:
    archives = sorted(directory.glob("*.tar.gz")) if directory.is_dir() else []
    return archives[0] if archives else None


def sdist(package: str, version: str, sha256: str, *, cache: Path | None = None) -> Path:
    """The path of the verified sdist ``package==version``, downloaded into the cache if missing.

    Raises ``IndexUnreachable`` when pip cannot fetch it and ``ChecksumMismatch`` when what it
    fetched (or what the cache holds) is not the archive pinned by ``sha256``.
    """
    root = cache or cache_dir()
    directory = root / sha256
    with _locked(root / f"{sha256}.lock"):
        archive = _cached_archive(directory)
        if archive is None:
            archive = _download(package, version, sha256, root=root)
        actual = file_sha256(archive)
        if actual != sha256:
            raise ChecksumMismatch(f"{archive} has sha256 {actual}, the pin for {package}=={version} is {sha256}")
        return archive


def _download(package: str, version: str, sha256: str, *, root: Path) -> Path:
    """Download into a temporary directory beside the cache entry; rename it into place once verified."""
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".download-{package}-", dir=root))
    try:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            "--ignore-requires-python", "--disable-pip-version-check", "--quiet",
            "--dest", str(staging), f"{package}=={version}",
        ]  # fmt: skip
        try:
            completed = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_SECONDS, check=False)
        except subprocess.TimeoutExpired as error:
            raise IndexUnreachable(f"pip download {package}=={version} took over {DOWNLOAD_TIMEOUT_SECONDS:g} s") from error
        archive = _cached_archive(staging)
        if completed.returncode != 0 or archive is None:
            reason = (completed.stderr or completed.stdout).strip().splitlines()
            raise IndexUnreachable(f"pip download {package}=={version} failed: {' | '.join(reason[-3:]) or 'no archive'}")
        actual = file_sha256(archive)
        if actual != sha256:
            raise ChecksumMismatch(f"the index served {archive.name} with sha256 {actual}, the pin for {package}=={version} is {sha256}")
        staging.rename(root / sha256)
        return root / sha256 / archive.name
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def extract(archive: Path) -> Path:
    """The extracted tree of ``archive`` (its one top-level directory), extracted once beside it.

    Extraction uses tarfile's ``data`` filter: no absolute paths, links out of the tree or devices.
    """
    target = archive.parent / "tree"
    with _locked(archive.parent / ".extract.lock"):
        if not target.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=archive.parent))
            try:
                with tarfile.open(archive, "r:gz") as tar:
                    tar.extractall(staging, filter="data")
                staging.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    tops = [path for path in target.iterdir() if path.is_dir()]
    if len(tops) != 1:
        raise UpstreamError(f"{archive.name} does not hold one top-level directory: {sorted(path.name for path in tops)}")
    return tops[0]


def source(pin: Pin) -> Path:
    """The extracted sdist of ``pin`` (downloading and verifying it first if needed)."""
    return extract(sdist(pin.package, pin.version, pin.sha256))


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(pin: Pin) -> Path:
    """``source(pin)`` for a test or a fixture: when the index cannot be reached, skip with pip's
    reason, or fail under ``CI=true``. A checksum mismatch always fails."""
    try:
        return source(pin)
    except IndexUnreachable as error:
        if in_ci():
            pytest.fail(f"upstream {pin.requirement} unavailable in CI: {error}", pytrace=False)
        pytest.skip(f"upstream {pin.requirement} unavailable (package index unreachable?): {error}", allow_module_level=True)


def read(root: Path, relative_path: str) -> str:
    """The text of one upstream file, by its path inside the sdist."""
    return (root / relative_path).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Substitution:
    """Replace ``old`` by ``new``. ``count``: how many times ``old`` must occur (None: at least once).

    ``reason`` says why, for the reader of the port script (it is not applied)."""

    old: str
    new: str
    count: int | None = 1
    reason: str = ""

    def apply(self, text: str, *, origin: str) -> str:
        found = text.count(self.old)
        if found == 0 if self.count is None else found != self.count:
            wanted = "at least once" if self.count is None else f"{self.count} time(s)"
            raise PortDrift(f"{origin}: {self.old!r} occurs {found} time(s), the port expects it {wanted}")
        return text.replace(self.old, self.new)


@dataclass(frozen=True)
class Definition:
    """Replace the definition (function, method or class, decorators included) named by its dotted
    ``qualname`` with ``new``, our own source, re-indented to where the definition stands.

    For a case whose upstream body asserts another backend's behaviour; ``reason`` says which."""

    qualname: str
    new: str
    reason: str = ""

    def apply(self, text: str, *, origin: str) -> str:
        node = _find_definition(ast.parse(text), self.qualname.split("."))
        if node is None:
            raise PortDrift(f"{origin}: no definition {self.qualname!r}, the port expects one")
        lines = text.splitlines(keepends=True)
        first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)]) - 1
        indent = " " * node.col_offset
        replacement = textwrap.indent(textwrap.dedent(self.new).strip("\n") + "\n", indent)
        return "".join([*lines[:first], replacement, *lines[node.end_lineno or node.lineno :]])


Definable = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _find_definition(scope: ast.AST, names: list[str]) -> Definable | None:
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, Definable) and child.name == names[0]:
            return child if len(names) == 1 else _find_definition(child, names[1:])
    return None


Edit = Substitution | Definition


def port(text: str, edits: Sequence[Edit], *, origin: str) -> str:
    """Apply ``edits`` in order; ``PortDrift`` (naming ``origin``) when one no longer matches the
    upstream text as written, so an upstream change is never silently skipped."""
    for edit in edits:
        text = edit.apply(text, origin=origin)
    return text


def port_file(upstream_file: Path, destination: Path, edits: Sequence[Edit] = ()) -> Path:
    """Write ``upstream_file`` ported by ``edits`` to ``destination`` (parents created)."""
    text = port(upstream_file.read_text(encoding="utf-8"), edits, origin=str(upstream_file))
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(text, encoding="utf-8")
    return destination


_DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. code-block::\s*(?P<language>\S*)")
_OPTION = re.compile(r"^\s+:[\w-]+:")


def code_blocks(rst: str) -> list[str]:
    """The literal blocks of a reStructuredText document, in order, dedented: ``.. code-block::``
    directives (any language) and paragraphs ending in ``::``. A port picks them by number
    (``Block``), so the numbering is the document's own order of blocks."""
    lines = rst.splitlines()
    blocks: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not (_DIRECTIVE.match(line) or (line.rstrip().endswith("::") and not line.lstrip().startswith(".."))):
            index += 1
            continue
        indent = len(line) - len(line.lstrip())
        index += 1
        while index < len(lines) and _OPTION.match(lines[index]):
            index += 1
        body: list[str] = []
        while index < len(lines) and (not lines[index].strip() or len(lines[index]) - len(lines[index].lstrip()) > indent):
            body.append(lines[index])
            index += 1
        code = textwrap.dedent("\n".join(body)).strip("\n")
        if code:
            blocks.append(code)
    return blocks


def console_to_code(block: str) -> str:
    """A ``>>>`` console block as code: the prompts' statements, without the printed output."""
    statements = [line[4:] for line in block.splitlines() if line.startswith((">>> ", "... ")) or line in (">>>", "...")]
    return "\n".join(statements)


@dataclass(frozen=True)
class Block:
    """Code block ``number`` of a document (``code_blocks``), which must start with ``first_line``
    (else ``PortDrift``); ``console``: a ``>>>`` block taken as code; ``stop_before``: the block
    is taken up to the line holding that text (a block that goes on with calls and output)."""

    number: int
    first_line: str
    edits: Sequence[Edit] = ()
    console: bool = False
    stop_before: str | None = None

    def take(self, blocks: Sequence[str], *, origin: str) -> str:
        if self.number >= len(blocks):
            raise PortDrift(f"{origin}: no code block #{self.number} (it has {len(blocks)})")
        code = blocks[self.number]
        if code.splitlines()[0].strip() != self.first_line.strip():
            raise PortDrift(f"{origin}: code block #{self.number} starts {code.splitlines()[0]!r}, the port expects {self.first_line!r}")
        if self.console:
            code = console_to_code(code)
        if self.stop_before is not None:
            lines = code.splitlines()
            cut = [number for number, line in enumerate(lines) if self.stop_before in line]
            if not cut:
                raise PortDrift(f"{origin}: code block #{self.number} has no line holding {self.stop_before!r}")
            code = "\n".join(lines[: cut[0]])
        return port(code, self.edits, origin=f"{origin} block #{self.number}").rstrip() + "\n"


_CELERY_FROM_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from celery(?P<module>[.\w]*) import", re.MULTILINE)
_CELERY_IMPORT = re.compile(r"^(?P<indent>[ \t]*)import celery$", re.MULTILINE)


def celery_imports_to_jobsapp(code: str) -> str:
    """The change a user migrating from Celery makes: ``from celery... import`` becomes
    ``from jobsapp.celery... import``, and ``import celery`` ``import jobsapp.celery as celery``."""
    code = _CELERY_FROM_IMPORT.sub(r"\g<indent>from jobsapp.celery\g<module> import", code)
    return _CELERY_IMPORT.sub(r"\g<indent>import jobsapp.celery as celery", code)


def materialize(name: str, files: dict[str, str], *, cache: Path | None = None) -> Path:
    """Write ``files`` (relative path -> text) once under ``<cache>/ported/<name>-<digest>/`` and
    return that directory. The digest covers every path and text, so concurrent test processes
    porting the same material share one directory, and a changed port gets a new one."""
    digest = hashlib.sha256()
    for relative_path in sorted(files):
        digest.update(f"{relative_path}\0{files[relative_path]}\0".encode())
    root = (cache or cache_dir()) / "ported"
    target = root / f"{name}-{digest.hexdigest()[:16]}"
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        for relative_path, text in files.items():
            destination = staging / relative_path
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_text(text, encoding="utf-8")
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # another process renamed the same content into place first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def case_classes(module: ModuleType) -> dict[str, type]:
    """The ``unittest.TestCase`` classes a ported module defines, for a test module of ours to
    expose to pytest (``globals().update(case_classes(module))``)."""
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, unittest.TestCase) and value.__module__ == module.__name__
    }
