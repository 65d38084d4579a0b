"""What a worker process imports: psycopg only when the database is PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_worker_on_sqlite_does_not_import_psycopg():
    # psycopg is ~9 MB of every -P child's memory, and a project on SQLite or MySQL need not have it
    code = (
        "import sys, django; django.setup();"
        "import tracking.recorder, tracking.launching, tracking.writer, tracking.middleware, jobsapp.worker.launcher;"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'psycopg'))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    env.pop("DATABASE_URL", None)  # SQLite
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
