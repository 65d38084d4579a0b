"""The pytest plugin is found both ways at once: through the ``pytest11`` entry point of an
installed jobsapp (a checkout with ``pip install .`` run in it leaves ``jobsapp.egg-info`` next to
the code) and through the project's own ``-p jobsapp.pytest_plugin``. pytest registers a plugin
under its entry point's name; a name other than the module's makes it refuse the second
registration ("Plugin already registered under a different name") and stop before any test."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_installed_entry_point_and_the_p_option_load_the_plugin_once(tmp_path: Path) -> None:
    # Given a distribution on the path declaring pyproject.toml's pytest11 entry points
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    dist_info = tmp_path / "site" / "jobsapp-0.0.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: jobsapp\nVersion: 0.0.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (dist_info / "entry_points.txt").write_text(f"[pytest11]\n{lines}")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    # When pytest runs there with the project's -p option too
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}
    environment.pop("PYTEST_ADDOPTS", None)
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "jobsapp.pytest_plugin", "tests"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Then the plugin loads once and the test runs
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "1 passed" in completed.stdout
