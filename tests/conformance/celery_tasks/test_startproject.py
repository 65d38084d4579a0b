"""A fresh ``django-admin startproject`` with Celery's Django example app (examples/django of the pinned sdist:
``proj/__init__.py``, ``proj/celery.py``, ``demoapp/``), its imports changed only, set up as the
example's README says (``demoapp`` in ``INSTALLED_APPS``) plus the README's minimal jobsapp setup,
running its tasks under a real ``runworkers`` on a throwaway Redis.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conformance.celery_tasks.ported_examples import examples_dir
from tests.redis_server import RedisServer
from tests.workers import ROOT_DIR

EXAMPLE = examples_dir() / "django"
pytestmark = pytest.mark.slow


def _run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 120) -> str:
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert completed.returncode == 0, f"{' '.join(command)} exited {completed.returncode}:\n{completed.stdout}\n{completed.stderr}"
    return completed.stdout


def test_a_fresh_project_runs_the_django_example_tasks(tmp_path):
    server = RedisServer().start()
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT_DIR), "DJANGO_SETTINGS_MODULE": "proj.settings"}
        env.pop("REDIS_URL", None)
        env.pop("DATABASE_URL", None)
        # Given a fresh project with the example's proj/celery.py and demoapp
        _run([sys.executable, "-m", "django", "startproject", "proj", "."], cwd=tmp_path, env=env)
        for name in ("__init__.py", "celery.py"):
            shutil.copy(EXAMPLE / "proj" / name, tmp_path / "proj" / name)
        shutil.copytree(EXAMPLE / "demoapp", tmp_path / "demoapp", ignore=shutil.ignore_patterns("__pycache__"))
        with (tmp_path / "proj" / "settings.py").open("a") as settings:
            settings.write(
                textwrap.dedent(f"""
                INSTALLED_APPS += ["jobsapp", "demoapp"]
                JOBSAPP = {{"REDIS_URL": "{server.url}"}}
                """)
            )
        _run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=tmp_path, env=env)
        # When runworkers runs and the README's shell session calls the tasks
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "runworkers", "-c", "2"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            script = textwrap.dedent("""
                from demoapp.models import Widget
                from demoapp.tasks import add, count_widgets, mul, rename_widget, xsum
                from proj.celery import debug_task
                widget = Widget.objects.create(name="old")
                print(add.delay(2, 3).get(timeout=30), mul.delay(2, 3).get(timeout=30), xsum.delay([1, 2, 3]).get(timeout=30))
                print(count_widgets.delay().get(timeout=30))
                rename_widget.delay(widget.id, "new").get(timeout=30)
                widget.refresh_from_db()
                print(widget.name, debug_task.delay().id)
            """)
            output = _run([sys.executable, "manage.py", "shell", "-c", script], cwd=tmp_path, env=env, timeout=120)
        finally:
            os.killpg(worker.pid, 15)
            worker_output = worker.communicate(timeout=60)[0]
        # Then the values are the example's, and debug_task printed its request in the worker
        lines = [line for line in output.split("\n") if line][-3:]  # after the shell's own banner
        assert lines[:2] == ["5 6 6", "1"], output
        name, debug_id = lines[2].split()
        assert name == "new"
        assert "Request: <Context" in worker_output and debug_id in worker_output, worker_output[-3000:]
    finally:
        server.stop()
