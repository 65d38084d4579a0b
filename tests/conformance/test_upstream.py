"""The upstream fetcher: pinned sdists downloaded once and verified, ports that fail on drift."""

from __future__ import annotations

import os
import tarfile
import threading
from pathlib import Path

import pytest

from tests.conformance import upstream
from tests.conformance.upstream import DJANGO_TASKS_RQ, Pin, Substitution


@pytest.fixture
def no_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip as on a machine that reaches no package index: no index, no local archives, no config."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)


@pytest.fixture(scope="module")
def reachable() -> Path:
    """The smallest pinned sdist through the shared cache: skips these tests where the index is
    unreachable (fails under CI=true), like every suite built on upstream material."""
    return upstream.require(DJANGO_TASKS_RQ)


def test_port_applies_each_substitution() -> None:
    # Given upstream text and the substitutions of its port
    text = "from celery import Celery\napp = Celery('tasks')\n"
    # When it is ported
    ported = upstream.port(text, [Substitution("from celery import", "from jobsapp.celery import")], origin="tasks.py")
    # Then the import is the project's, the rest untouched
    assert ported == "from jobsapp.celery import Celery\napp = Celery('tasks')\n"


def test_a_substitution_that_no_longer_matches_fails_loudly() -> None:
    # Given a port written for a line upstream has since changed
    substitutions = [Substitution("from celery import Celery", "from jobsapp.celery import Celery")]
    # When the port runs on the new text, Then it refuses, naming the file and the line
    with pytest.raises(upstream.PortDrift, match=r"tasks\.py: 'from celery import Celery' occurs 0 time"):
        upstream.port("import celery\n", substitutions, origin="tasks.py")


def test_a_substitution_matching_more_often_than_stated_fails() -> None:
    # Given a substitution written for one occurrence, When the text holds two, Then PortDrift
    with pytest.raises(upstream.PortDrift, match="occurs 2 time"):
        upstream.port("a\na\n", [Substitution("a", "b")], origin="x")
    # and count=None accepts any number of occurrences but none
    assert upstream.port("a\na\n", [Substitution("a", "b", count=None)], origin="x") == "b\nb\n"
    with pytest.raises(upstream.PortDrift, match="at least once"):
        upstream.port("c\n", [Substitution("a", "b", count=None)], origin="x")


def test_port_file_writes_the_ported_text(tmp_path: Path) -> None:
    source = tmp_path / "upstream" / "tasks.py"
    source.parent.mkdir()
    source.write_text("from . import tasks\n")
    written = upstream.port_file(source, tmp_path / "ported" / "pkg" / "tasks.py", [Substitution("from . import", "from pkg import")])
    assert written.read_text() == "from pkg import tasks\n"


def test_extract_returns_the_top_directory_once(tmp_path: Path) -> None:
    # Given an sdist-shaped archive
    tree = tmp_path / "pkg-1.0"
    (tree / "tests").mkdir(parents=True)
    (tree / "tests" / "tests.py").write_text("x = 1\n")
    entry = tmp_path / "cache" / "abc"
    entry.mkdir(parents=True)
    archive = entry / "pkg-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname="pkg-1.0")
    # When it is extracted twice
    first = upstream.extract(archive)
    second = upstream.extract(archive)
    # Then both name the same tree, holding the file
    assert first == second == entry / "tree" / "pkg-1.0"
    assert upstream.read(first, "tests/tests.py") == "x = 1\n"


def test_the_pinned_sdist_is_downloaded_once_and_verified(reachable: Path, tmp_path: Path, no_index: None) -> None:
    # Given a cache already holding the pinned archive (the shared cache's copy)
    cache = tmp_path / "cache"
    archive = upstream.sdist(DJANGO_TASKS_RQ.package, DJANGO_TASKS_RQ.version, DJANGO_TASKS_RQ.sha256, cache=upstream.cache_dir())
    (cache / DJANGO_TASKS_RQ.sha256).mkdir(parents=True)
    (cache / DJANGO_TASKS_RQ.sha256 / archive.name).write_bytes(archive.read_bytes())
    # When it is asked for with no index reachable, Then the cache answers without pip
    found = upstream.sdist(DJANGO_TASKS_RQ.package, DJANGO_TASKS_RQ.version, DJANGO_TASKS_RQ.sha256, cache=cache)
    assert found == cache / DJANGO_TASKS_RQ.sha256 / "django_tasks_rq-0.12.0.tar.gz"
    assert upstream.file_sha256(found) == DJANGO_TASKS_RQ.sha256
    # and the extracted tree is the sdist's, tests included
    assert (upstream.extract(found) / "tests" / "tests.py").is_file()


def test_a_cached_archive_that_is_not_the_pinned_one_is_refused(tmp_path: Path, no_index: None) -> None:
    # Given a cache entry whose bytes are not the pinned archive
    pin = Pin("django-tasks-rq", "0.12.0", "0" * 64)
    (tmp_path / pin.sha256).mkdir()
    (tmp_path / pin.sha256 / "django_tasks_rq-0.12.0.tar.gz").write_bytes(b"tampered")
    # When it is asked for, Then ChecksumMismatch, never the tampered file
    with pytest.raises(upstream.ChecksumMismatch, match=r"the pin for django-tasks-rq==0\.12\.0 is 0000"):
        upstream.sdist(pin.package, pin.version, pin.sha256, cache=tmp_path)


def test_a_download_that_is_not_the_pinned_one_is_not_kept(reachable: Path, tmp_path: Path) -> None:
    # Given a pin whose sha256 is wrong for the version the index serves
    pin = Pin(DJANGO_TASKS_RQ.package, DJANGO_TASKS_RQ.version, "f" * 64)
    # When it is downloaded, Then ChecksumMismatch, and the cache keeps nothing of it
    with pytest.raises(upstream.ChecksumMismatch, match=r"the index served django_tasks_rq-0\.12\.0\.tar\.gz"):
        upstream.sdist(pin.package, pin.version, pin.sha256, cache=tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"{pin.sha256}.lock"]


def test_concurrent_fetches_download_once_and_agree(reachable: Path, tmp_path: Path) -> None:
    # Given an empty cache and four fetches at once
    results: list[Path] = []
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            results.append(upstream.sdist(DJANGO_TASKS_RQ.package, DJANGO_TASKS_RQ.version, DJANGO_TASKS_RQ.sha256, cache=tmp_path))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then all get the same verified archive and no staging directory is left behind
    assert errors == []
    assert len(set(results)) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([DJANGO_TASKS_RQ.sha256, f"{DJANGO_TASKS_RQ.sha256}.lock"])


def test_an_unreachable_index_is_a_skip_with_the_reason(tmp_path: Path, no_index: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no index and an empty cache, outside CI
    monkeypatch.setenv(upstream.CACHE_ENVIRONMENT_VARIABLE, str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    # When a suite requires the material, Then it is skipped, saying pip's reason
    with pytest.raises(pytest.skip.Exception, match=r"upstream django-tasks-rq==0\.12\.0 unavailable .*pip download"):
        upstream.require(DJANGO_TASKS_RQ)


def test_an_unreachable_index_fails_in_ci(tmp_path: Path, no_index: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no index and an empty cache, under CI=true (CI reaches the index)
    monkeypatch.setenv(upstream.CACHE_ENVIRONMENT_VARIABLE, str(tmp_path))
    monkeypatch.setenv("CI", "true")
    # When a suite requires the material, Then the run fails instead of going silent
    with pytest.raises(pytest.fail.Exception, match=r"upstream django-tasks-rq==0\.12\.0 unavailable in CI"):
        upstream.require(DJANGO_TASKS_RQ)


def test_a_definition_is_replaced_by_name_decorators_included() -> None:
    # Given a test class whose method asserts another backend's behaviour
    text = "class Case:\n    @decorated\n    def test_a(self):\n        upstream()\n\n    def test_b(self):\n        kept()\n"
    # When the port replaces that method by its qualified name
    ported = upstream.port(text, [upstream.Definition("Case.test_a", "def test_a(self):\n    ours()\n")], origin="t.py")
    # Then ours stands at the method's place and indentation, the rest untouched
    assert ported == "class Case:\n    def test_a(self):\n        ours()\n\n    def test_b(self):\n        kept()\n"
    # and a definition upstream no longer has is drift
    with pytest.raises(upstream.PortDrift, match=r"no definition 'Case\.test_c'"):
        upstream.port(text, [upstream.Definition("Case.test_c", "def test_c(self): ...")], origin="t.py")


def test_materialize_writes_a_tree_once_per_content(tmp_path: Path) -> None:
    # Given the files of a port
    files = {"pkg/__init__.py": "", "pkg/tasks.py": "x = 1\n"}
    # When it is materialized twice, and once with a changed file
    first = upstream.materialize("suite", files, cache=tmp_path)
    again = upstream.materialize("suite", dict(files), cache=tmp_path)
    changed = upstream.materialize("suite", {**files, "pkg/tasks.py": "x = 2\n"}, cache=tmp_path)
    # Then the same content shares one directory, a change gets its own
    assert first == again != changed
    assert (first / "pkg" / "tasks.py").read_text() == "x = 1\n"
    assert (changed / "pkg" / "tasks.py").read_text() == "x = 2\n"


RST = """Intro.

.. code-block:: python
    :emphasize-lines: 1

    @app.task
    def add(x, y):
        return x + y

A console session::

    >>> add.delay(2, 2)
    >>> def f():
    ...     return 1
    4

End.
"""


def test_code_blocks_are_taken_by_number_and_checked() -> None:
    # Given a document with a directive block and a console block
    blocks = upstream.code_blocks(RST)
    assert blocks == ["@app.task\ndef add(x, y):\n    return x + y", ">>> add.delay(2, 2)\n>>> def f():\n...     return 1\n4"]
    # When blocks are taken with their edits, Then they are code, output dropped
    first = upstream.Block(0, "@app.task", [Substitution("def add(", "def add_2(")]).take(blocks, origin="guide.rst")
    assert first == "@app.task\ndef add_2(x, y):\n    return x + y\n"
    assert upstream.Block(1, ">>> add.delay(2, 2)", console=True).take(blocks, origin="g") == "add.delay(2, 2)\ndef f():\n    return 1\n"
    assert upstream.Block(0, "@app.task", stop_before="return").take(blocks, origin="g") == "@app.task\ndef add(x, y):\n"
    # and a block that moved is drift, not another block silently taken
    with pytest.raises(upstream.PortDrift, match=r"block #1 starts '>>> add.delay\(2, 2\)'"):
        upstream.Block(1, "@app.task").take(blocks, origin="guide.rst")


def test_celery_imports_become_jobsapp_imports() -> None:
    code = (
        "import celery\nfrom celery import Task\nfrom celery.exceptions import Reject\n    from celery.app import task\nimport celeryish\n"
    )
    assert upstream.celery_imports_to_jobsapp(code) == (
        "import jobsapp.celery as celery\nfrom jobsapp.celery import Task\nfrom jobsapp.celery.exceptions import Reject\n"
        "    from jobsapp.celery.app import task\nimport celeryish\n"
    )
