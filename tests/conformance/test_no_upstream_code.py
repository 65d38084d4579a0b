"""No upstream code in the repository: the conformance suites take it from the pinned sdists.

The proof reads the upstream material itself, from the sdists at test time (Django's
``tests/tasks`` and its tasks docs, django-tasks-rq's tests, Celery's ``examples/``,
``t/integration/`` and the code blocks of its user guide and getting-started docs), and looks for
its distinctive passages in every file of the repository that git knows of (tracked, or new and
not ignored; ``var/``, where the ports are written, is ignored).

A distinctive passage is three consecutive lines (whitespace collapsed, blank lines and import
lines left out) of at least 70 characters together: long enough that an API call or a signature
that any code using the same library writes (``def on_failure(self, exc, task_id, args, kwargs,
einfo):``) does not count, short enough that any copied block of a test or an example does. The
port scripts name single upstream lines (the anchors of their substitutions); they never hold
three in a row.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.conformance import upstream

WINDOW_LINES = 3
WINDOW_MIN_CHARACTERS = 70
TEXT_SUFFIXES = frozenset({".py", ".md", ".rst", ".txt", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".html", ".js", ".lua", ".rb"})

Window = tuple[str, ...]


def windows(text: str) -> Iterator[Window]:
    """The distinctive passages of ``text``: runs of ``WINDOW_LINES`` significant lines."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    significant = [line for line in lines if line and not line.startswith(("import ", "from "))]
    for start in range(len(significant) - WINDOW_LINES + 1):
        window = tuple(significant[start : start + WINDOW_LINES])
        if sum(map(len, window)) >= WINDOW_MIN_CHARACTERS:
            yield window


def upstream_material() -> dict[str, str]:
    """Every upstream text the conformance suites take or might take, by a name saying where it
    is from; downloaded (or skipped, or failed in CI) through upstream.require."""
    django, rq, celery = (upstream.require(pin) for pin in (upstream.DJANGO, upstream.DJANGO_TASKS_RQ, upstream.CELERY))
    texts: dict[str, str] = {}
    for root, pin, patterns in (
        (django, upstream.DJANGO, ["tests/tasks/*.py"]),
        (rq, upstream.DJANGO_TASKS_RQ, ["tests/*.py"]),
        (celery, upstream.CELERY, ["examples/**/*.py", "t/integration/*.py"]),
    ):
        for pattern in patterns:
            for path in sorted(root.glob(pattern)):
                texts[f"{pin.requirement} {path.relative_to(root)}"] = path.read_text(encoding="utf-8")
    for root, pin, patterns in (
        (django, upstream.DJANGO, ["docs/topics/tasks.txt", "docs/ref/tasks.txt"]),
        (celery, upstream.CELERY, ["docs/userguide/*.rst", "docs/getting-started/*.rst", "examples/**/*.rst"]),
    ):
        for pattern in patterns:
            for path in sorted(root.glob(pattern)):
                for number, block in enumerate(upstream.code_blocks(path.read_text(encoding="utf-8"))):
                    texts[f"{pin.requirement} {path.relative_to(root)} block #{number}"] = block
    return texts


def repository_files(root: Path) -> list[Path]:
    """The text files of the repository at ``root``: tracked, or new and not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=root, capture_output=True, check=True
    ).stdout.decode()
    return [root / name for name in listed.split("\0") if name and Path(name).suffix in TEXT_SUFFIXES and (root / name).is_file()]


def copies(material: dict[str, str], files: Iterable[Path], *, root: Path) -> dict[str, list[str]]:
    """For each file holding a distinctive passage of ``material``: the passages and their source."""
    sources: dict[Window, str] = {}
    for name, text in material.items():
        for window in windows(text):
            sources.setdefault(window, name)
    found: dict[str, list[str]] = {}
    for path in files:
        for window in windows(path.read_text(encoding="utf-8", errors="replace")):
            if window in sources:
                found.setdefault(str(path.relative_to(root)), []).append(f"{' / '.join(window)!r} (from {sources[window]})")
    return found


def test_the_repository_holds_no_upstream_code() -> None:
    # Given the upstream material, from the pinned sdists
    material = upstream_material()
    assert len(material) > 100, "the upstream material was not read"
    # When every file of the repository is searched for its distinctive passages
    found = copies(material, repository_files(upstream.ROOT_DIR), root=upstream.ROOT_DIR)
    # Then none holds one
    assert found == {}, "upstream code in the repository:\n" + "\n".join(
        f"{path}: {len(passages)} passage(s), e.g. {passages[0]}" for path, passages in found.items()
    )


def test_the_search_finds_a_copied_block(tmp_path: Path) -> None:
    # Given a file holding a few lines of Django's tests/tasks/test_tasks.py, reindented and
    # between lines of its own (as a copy adapted by hand would be)
    upstream_text = upstream.read(upstream.require(upstream.DJANGO), "tests/tasks/test_tasks.py")
    passage = next(windows(upstream_text))
    copied = tmp_path / "test_copied.py"
    copied.write_text("x = 1\n" + "\n".join(f"        {line}" for line in passage) + "\ny = 2\n")
    # When it is searched, Then the passage is found and named with its source
    found = copies({"django tests/tasks/test_tasks.py": upstream_text}, [copied], root=tmp_path)
    assert list(found) == ["test_copied.py"]
    assert "(from django tests/tasks/test_tasks.py)" in found["test_copied.py"][0]
