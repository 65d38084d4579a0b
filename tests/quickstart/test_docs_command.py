"""The README's documentation command works right after the Quickstart.

The Quickstart's ``bin/demo`` installs only the runtime requirements, so the command the README
gives for the manual must install the documentation tools itself: ``bin/docs`` does
(``requirements-docs.txt``), then runs mkdocs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT_DIR = Path(__file__).resolve().parents[2]


def readme_docs_command() -> str:
    readme = (ROOT_DIR / "README.md").read_text(encoding="utf-8")
    found = re.search(r"The manual is a documentation site built from .*?\(`([^`]+)`", readme, re.DOTALL)
    assert found, "the README names no command for the manual"
    return found.group(1)


def requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            names |= requirement_names(path.parent / line[3:].strip())
        elif line:
            names.add(re.split(r"[=<>!~\[ ]", line, maxsplit=1)[0].lower())
    return names


def test_the_readmes_docs_command_installs_the_tools_it_runs():
    # Given the command the README gives for the manual
    program = readme_docs_command().split()[0]
    # Then it is a script of this checkout, not a tool only the dev requirements install
    script = ROOT_DIR / program
    assert script.is_file() and os.access(script, os.X_OK), program
    # And it installs a requirements file that holds mkdocs and its theme
    installed = re.findall(r"setup::python_venv (\S+)", script.read_text(encoding="utf-8"))
    assert installed and {"mkdocs", "mkdocs-material"} <= requirement_names(ROOT_DIR / installed[0])
    # And the Quickstart's runtime requirements do not (bin/demo installs those alone)
    assert "mkdocs" not in requirement_names(ROOT_DIR / "requirements.txt")


@pytest.mark.slow
def test_bin_docs_builds_the_site(tmp_path):
    if Path(sys.prefix).resolve() != (ROOT_DIR / ".venv").resolve():
        pytest.skip("bin/docs uses this checkout's .venv: run the tests with it (bin/test)")
    # When bin/docs is given mkdocs arguments, Then mkdocs runs with them: the site builds strictly
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "PYTEST"))}
    result = subprocess.run(
        [str(ROOT_DIR / "bin" / "docs"), "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "index.html").is_file()
