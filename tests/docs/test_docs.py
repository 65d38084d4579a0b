"""The documentation keeps up with the code: the README stays a front door whose links resolve, and
the architecture page places every module of ``jobsapp/`` and ``tracking/``.

No Redis and no database: these read files only. The site itself (every page in the nav, every
link and anchor) is checked by ``mkdocs build --strict`` in ``.ci/run``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Packages whose ``__init__`` only makes a directory importable (Django's layout), not a module.
PLAIN_PACKAGES = {"jobsapp.management", "jobsapp.management.commands", "jobsapp.templatetags"}
#: The Quickstart's two commands, byte for byte: CI and tests/quickstart run them as written.
QUICKSTART = """```sh
bin/demo    # sets everything up, runs demo jobs, then serves the dashboard until Ctrl-C
bin/test    # runs the whole test suite
```"""


def modules() -> list[str]:
    """Every module of the two apps as a dotted name (packages by their own name), less migrations."""
    names = []
    for path in sorted([*ROOT.glob("jobsapp/**/*.py"), *ROOT.glob("tracking/**/*.py")]):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "migrations" in parts:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name not in PLAIN_PACKAGES:
            names.append(name)
    return names


def placed(module: str, page: str) -> bool:
    """Named in backticks, or as a leaf in the parenthesized list after its package's name:
    "`jobsapp.api` (`stats`, `queues`, ...)"."""
    if f"`{module}`" in page:
        return True
    package, _, leaf = module.rpartition(".")
    return any(f"`{leaf}`" in listed for listed in re.findall(rf"`{re.escape(package)}` \(([^)]*)\)", page))


def test_the_architecture_page_places_every_module():
    # Given every module of jobsapp/ and tracking/
    names = modules()
    assert "jobsapp.worker.processor" in names and "tracking.writer" in names
    # When the architecture page is read
    page = (ROOT / "docs" / "architecture.md").read_text()
    # Then each one is placed there
    missing = [name for name in names if not placed(name, page)]
    assert not missing, f"docs/architecture.md does not place {missing}: add each to its table ('Every module, and where it sits')"


def test_the_readme_is_a_front_door_with_the_quickstart_and_links_that_resolve():
    # Given the README
    readme = (ROOT / "README.md").read_text()
    # Then it stays short, with the Quickstart's two commands as CI runs them
    assert len(readme.splitlines()) <= 400, "README.md is the front door: put the manual in docs/"
    assert QUICKSTART in readme
    # And every relative link in it names a file of the repository
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    relative = [target for target in targets if "://" not in target]
    assert relative, "the README links to the docs"
    broken = [target for target in relative if not (ROOT / target).exists()]
    assert not broken, f"README.md links to missing files: {broken}"


def install_blocks(text: str) -> dict[str, str]:
    """The fenced blocks marked ``<!-- install: <label> -->``, by label."""
    return dict(re.findall(r"<!-- install: (.*?) -->\n```python\n(.*?)```", text, re.DOTALL))


def test_the_docs_install_blocks_are_the_readmes_which_a_fresh_project_runs():
    # Given the README's install blocks (tests/packaging/test_fresh_project.py applies them to a
    # fresh startproject) and the docs pages that show them too
    readme = install_blocks((ROOT / "README.md").read_text())
    assert {"settings.py full", "urls.py full", "test_jobs.py"} <= set(readme)
    for page in sorted((ROOT / "docs").rglob("*.md")):
        # Then every block a page marks is the README's, byte for byte
        for label, block in install_blocks(page.read_text()).items():
            assert readme.get(label) == block, f"{page.relative_to(ROOT)}: the block 'install: {label}' differs from the README's"
