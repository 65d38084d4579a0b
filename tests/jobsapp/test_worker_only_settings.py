"""A worker-only settings module (jobsapp installed, no ROOT_URLCONF): the management commands a
worker host runs, ``check`` and ``migrate``, work as they do with the full project."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.workers import ROOT_DIR

WORKER_ONLY_SETTINGS = """
from project.settings import *  # noqa: F403

del ROOT_URLCONF  # noqa: F821  a worker host serves no URLs
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {database!r}}}}}
"""


def manage(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT_DIR)]),
        "DJANGO_SETTINGS_MODULE": "worker_only_settings",
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT_DIR, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_check_and_migrate_run_clean_without_root_urlconf(tmp_path):
    # Given a settings module with jobsapp installed and no ROOT_URLCONF
    (tmp_path / "worker_only_settings.py").write_text(WORKER_ONLY_SETTINGS.format(database=str(tmp_path / "db.sqlite3")))
    # When check and migrate run
    checked = manage(tmp_path, "check")
    migrated = manage(tmp_path, "migrate", "--no-input")
    # Then both succeed, with no traceback
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout
    assert migrated.returncode == 0, migrated.stderr
    assert "Traceback" not in checked.stderr + migrated.stderr
