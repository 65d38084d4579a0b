"""A new user's path, end to end, from the built wheel (issue 8): no PYTHONPATH, no checkout.

Builds the wheel from the tracked files, installs it into a fresh virtualenv (its dependencies
come from the test run's own site-packages, added through a ``.pth`` file, so nothing is
downloaded and pip still checks the declared ranges), runs ``django-admin startproject``, applies
the README's "Full setup" blocks literally (they are appended to ``settings.py`` and ``urls.py``),
then runs a plain job, an async job (``async def perform``, awaited on the worker's event loop)
and a tracked task through a real ``runworkers`` on a throwaway Redis.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def readme_block(label: str) -> str:
    """The fenced block that follows ``<!-- install: <label> -->`` in the README."""
    readme = (ROOT / "README.md").read_text()
    match = re.search(rf"<!-- install: {re.escape(label)} -->\n```python\n(.*?)```", readme, re.DOTALL)
    assert match, f"README has no block marked 'install: {label}'"
    return match.group(1)


def run(command: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the repository's files (the checkout stays clean)."""
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        origin = ROOT / name
        if origin.is_file() and not origin.is_symlink():
            target = source / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(origin.read_bytes())
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)], cwd=source)
    [built] = out.glob("jobsapp-*.whl")
    return built


def test_the_wheel_holds_the_two_apps_and_their_files_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"jobsapp", "tracking", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    for needed in (
        "jobsapp/py.typed",
        "tracking/py.typed",
        "jobsapp/lua/fetch.lua",
        "jobsapp/templates/jobsapp/base.html",
        "jobsapp/static/jobsapp/dashboard.js",
        "tracking/templates/tracking/task_progress.html",
        "tracking/static/tracking/progress.js",
        "tracking/migrations/0001_initial.py",
    ):
        assert needed in names, needed
    metadata = zipfile.ZipFile(wheel).read(next(name for name in names if name.endswith("METADATA"))).decode()
    assert "License-Expression: MIT" in metadata and "## Add jobsapp to your project" in metadata
    assert re.search(r"Requires-Dist: django<7,>=5\.2", metadata, re.IGNORECASE)
    assert "Provides-Extra: tracking" in metadata and "Provides-Extra: hiredis" in metadata


@pytest.fixture(scope="module")
def fresh_python(wheel, tmp_path_factory) -> Path:
    """A new virtualenv with the wheel installed (``jobsapp[all]``) and nothing of the checkout."""
    venv = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", str(venv)], cwd=venv)
    python = venv / "bin" / "python"
    purelib = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=venv).strip())
    (purelib / "test_run_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheel.parent), "jobsapp[all]"], cwd=venv)
    return python


JOBS_PY = """
import asyncio
import os
import threading
from pathlib import Path

from jobsapp import Job, sidekiq_options
from tracking import TrackedJob


class SendReceipt(Job):
    def perform(self, order_id):
        if "SHOP_OUTPUT" in os.environ:
            Path(os.environ["SHOP_OUTPUT"], "receipt").write_text(str(order_id))


class AsyncReceipt(Job):
    async def perform(self, order_id):
        await asyncio.sleep(0.01)
        if "SHOP_OUTPUT" in os.environ:
            Path(os.environ["SHOP_OUTPUT"], "async-receipt").write_text(f"{order_id} {threading.current_thread().name}")


@sidekiq_options(use_task_event=True)
class CountItem(TrackedJob):
    def perform(self, number):
        self.report_progress(1, 2, unit="step")
        self.report_progress(2, 2, unit="step")
"""

ENQUEUE_AND_WAIT = """
import os, time
from pathlib import Path

from django.contrib.auth.models import User
from django.test import Client

from django.conf import settings

web = Client(HTTP_HOST="localhost")
print("middleware", "jobsapp.http.RedisUnavailableMiddleware" in settings.MIDDLEWARE)
print("dashboard", web.get("/jobs/").status_code, web.get("/jobs/")["Location"].split("?")[0])
print("progress", web.get("/tasks/x/")["Location"].split("?")[0])
print("metrics", web.get("/jobs/metrics").status_code, web.get("/jobs/metrics", HTTP_AUTHORIZATION="Bearer no").status_code)
print("api", web.get("/api/tasks/").status_code)
web.force_login(User.objects.create_user("ann", is_staff=True))
print("schema", web.get("/api/schema/").status_code, "browsable", web.get("/api/tasks/", HTTP_ACCEPT="text/html").status_code)

from orders.jobs import AsyncReceipt, CountItem, SendReceipt
from tracking.models import Task

SendReceipt.perform_async(42)
AsyncReceipt.perform_async(43)
task = Task.objects.launch(CountItem, [[1], [2], [3]], name="count")
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    task.refresh_from_db()
    if task.status == "finished" and all(Path(os.environ["SHOP_OUTPUT"], name).exists() for name in ("receipt", "async-receipt")):
        break
    time.sleep(0.1)
print("summary", task.status, task.counts["finish"], task.total)
"""


def test_a_fresh_project_runs_a_job_and_a_tracked_task_from_the_wheel(fresh_python, tmp_path):
    # Given a fresh startproject with the wheel installed and the README's full setup applied
    python = str(fresh_python)
    located = run([python, "-c", "import jobsapp, tracking; print(jobsapp.__file__, tracking.__file__)"], cwd=tmp_path)
    assert str(ROOT) not in located and "site-packages" in located
    for stranger in ("project", "fixtures", "bench"):
        probe = subprocess.run([python, "-c", f"import {stranger}"], cwd=tmp_path, capture_output=True, check=False)
        assert probe.returncode != 0, f"{stranger} is importable from the installed package"
    run([python, "-m", "django", "startproject", "shop"], cwd=tmp_path)
    site = tmp_path / "shop"
    with (site / "shop" / "settings.py").open("a") as settings_file:
        settings_file.write("\n# --- README: Add jobsapp to your project (full setup)\n" + readme_block("settings.py full"))
        settings_file.write('\nINSTALLED_APPS += ["orders"]\n')
    with (site / "shop" / "urls.py").open("a") as urls_file:
        urls_file.write("\n" + readme_block("urls.py full"))
    run([python, "manage.py", "startapp", "orders"], cwd=site)
    (site / "orders" / "jobs.py").write_text(textwrap.dedent(JOBS_PY))
    output = tmp_path / "output"
    output.mkdir()
    server = RedisServer().start()
    env = {**os.environ, "REDIS_URL": server.url, "SHOP_OUTPUT": str(output), "PYTHONPATH": "", "DJANGO_SETTINGS_MODULE": ""}
    del env["DJANGO_SETTINGS_MODULE"]
    worker = None
    try:
        checked = run([python, "manage.py", "check"], cwd=site, env=env)
        assert "System check identified no issues" in checked, checked
        run([python, "manage.py", "migrate", "-v", "0"], cwd=site, env=env)
        # When runworkers runs and a view-like caller enqueues a plain job and launches a task
        log = (tmp_path / "workers.log").open("w")
        worker = subprocess.Popen(
            [python, "manage.py", "runworkers", "-c", "3", "-t", "5"], cwd=site, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        redis = server.client()
        deadline = time.monotonic() + 30
        while not redis.scard("processes"):
            assert worker.poll() is None and time.monotonic() < deadline, (tmp_path / "workers.log").read_text()
            time.sleep(0.05)
        summary = run([python, "manage.py", "shell", "-v", "0", "-c", ENQUEUE_AND_WAIT], cwd=site, env=env, timeout=60)
        # Then anonymous visitors meet a login that exists, a scraper a 401/403, the API a refusal
        lines = dict(line.split(" ", 1) for line in summary.splitlines() if " " in line)
        assert lines["dashboard"] == "302 /admin/login/" and lines["progress"] == "/admin/login/", summary
        assert lines["metrics"] == "401 403" and lines["api"] in ("401", "403"), summary
        assert lines["schema"] == "200 browsable 200", summary
        assert lines["middleware"] == "True", summary  # Redis down in a view: 503, not 500
        # And the plain and async jobs run and the task finishes with its three jobs counted
        assert summary.split()[-4:] == ["summary", "finished", "3", "3"], (summary, (tmp_path / "workers.log").read_text())
        assert (output / "receipt").read_text() == "42"
        # And the async job was awaited on the worker's event loop (not lost, not run in a thread)
        assert (output / "async-receipt").read_text() == "43 jobsapp.event-loop", (tmp_path / "workers.log").read_text()
        # And the README's example tests pass there, with the plugin the wheel registers
        (site / "orders" / "test_jobs.py").write_text(readme_block("test_jobs.py"))
        test_env = {key: value for key, value in env.items() if key != "SHOP_OUTPUT"}
        tested = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ds=shop.settings", "orders/test_jobs.py"],
            cwd=site,
            env=test_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert tested.returncode == 0 and "2 passed" in tested.stdout, tested.stdout + tested.stderr
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0, (tmp_path / "workers.log").read_text()
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        server.stop()
