"""The long fault run, by hand: ``.venv/bin/python tests/faults/soak.py [pytest args]``.

Runs tests/faults with ``JOBSAPP_SOAK=1``: scenario 1 kills a worker every 2-5 s for a minute
over 30,000 jobs and checks the 90 s orphan bound with production intervals, scenario 10 runs
10,000 tracked jobs (set ``DATABASE_URL=postgresql://...`` for PostgreSQL). The measurements are
printed at the end and written to ``var/faults-soak.json``. Takes 10-15 minutes on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    (ROOT / "var").mkdir(exist_ok=True)
    env = {**os.environ, "JOBSAPP_SOAK": "1", "JOBSAPP_FAULTS_REPORT": str(ROOT / "var" / "faults-soak.json")}
    command = [sys.executable, "-m", "pytest", "-q", "-o", "timeout=1200", "tests/faults", *sys.argv[1:]]
    return subprocess.call(command, cwd=ROOT, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
