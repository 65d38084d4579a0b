"""Typing: Celery code in the forms its docs use (typing_sample.py) type-checks against jobsapp.celery
at least as well as against celery-types, the reference stubs: mypy --strict runs over it twice,
with its ``celery`` imports and with them changed to ``jobsapp.celery``, and every error of the
second run (by line and error code) must be one the first run reports too."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = Path(__file__).resolve().parent / "typing_sample.py"
MYPY = Path(sys.executable).with_name("mypy")
ERROR = re.compile(r"^sample\.py:(\d+): error: (.*)  \[([a-z-]+)\]$")


def _has_celery_types() -> bool:
    try:
        importlib.metadata.version("celery-types")
    except importlib.metadata.PackageNotFoundError:
        return False
    return MYPY.exists()


def _mypy_errors(directory: Path, text: str) -> dict[tuple[int, str], str]:
    """(line, error code) -> message of each error mypy --strict reports for ``text``."""
    module = directory / "sample.py"
    module.write_text(text)
    command = [str(MYPY), "--strict", "--no-incremental", "--follow-imports=silent", "--config-file=", str(module)]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    errors = {}
    for line in completed.stdout.splitlines():
        match = ERROR.match(line.replace(f"{directory}/", ""))
        if match:
            errors[(int(match.group(1)), match.group(3))] = match.group(2)
    assert completed.returncode in (0, 1), completed.stdout + completed.stderr  # 2: mypy itself failed
    return errors


@pytest.mark.slow
@pytest.mark.skipif(not _has_celery_types(), reason="mypy or celery-types is not installed (pip install -r requirements-dev.txt)")
def test_the_docs_code_type_checks_against_jobsapp_as_against_celery_types(tmp_path):
    # Given Celery code in its docs' forms, with its imports
    text = SAMPLE.read_text()
    ported = re.sub(r"^from celery([ .])", r"from jobsapp.celery\1", text, flags=re.MULTILINE)
    assert "from celery" not in ported and ported.count("from jobsapp.celery") == text.count("from celery")
    # When mypy checks it against celery-types, then against jobsapp.celery
    (tmp_path / "celery_types").mkdir()
    (tmp_path / "jobsapp").mkdir()
    reference = _mypy_errors(tmp_path / "celery_types", text)
    ours = _mypy_errors(tmp_path / "jobsapp", ported)
    # Then jobsapp reports nothing celery-types would not
    extra = {key: message for key, message in ours.items() if key not in reference}
    assert not extra, f"errors against jobsapp.celery that celery-types does not report: {extra}"
