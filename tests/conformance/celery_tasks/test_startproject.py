"""A fresh ``django-admin startproject`` with Celery's Django example app (examples/django of the pinned sdist:
``proj/__init__.py``, ``proj/celery.py``, ``demoapp/``), its imports changed only, set up as the
example's README says (``demoapp`` in ``INSTALLED_APPS``) plus the README's minimal jobsapp setup,
running its tasks under a real ``runworkers`` on a throwaway Redis.

Beside it, an app of our own written as Celery projects write theirs (``AUDIT_APP``: signal
receivers connected from ``AppConfig.ready``, as Sentry and logging hooks are, and tasks that
``self.replace`` themselves by a chain or a group), with ``celery`` in its imports turned into
``jobsapp.celery`` and nothing else changed.
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

#: A Django app as a Celery project writes it, with ``from celery`` spelled ``from jobsapp.celery``.
#: Each receiver appends a line to the file named by ``$AUDIT_LOG`` in the process it runs in.
AUDIT_APP = {
    "__init__.py": "",
    "apps.py": """
        from django.apps import AppConfig


        class AuditConfig(AppConfig):
            name = "audit"

            def ready(self):
                from . import signals  # noqa: F401  (connects the receivers)
        """,
    "signals.py": """
        import os

        from jobsapp.celery.signals import (
            before_task_publish,
            task_failure,
            task_postrun,
            task_prerun,
            task_received,
            task_success,
            worker_ready,
            worker_shutdown,
        )


        def _log(*words):
            with open(os.environ["AUDIT_LOG"], "a") as log:
                log.write(" ".join(str(word) for word in (os.getpid(), *words)) + "\\n")


        @before_task_publish.connect
        def published(sender=None, headers=None, **kwargs):
            _log("publish", sender, headers["id"])


        @worker_ready.connect
        def ready(sender=None, **kwargs):
            _log("worker_ready")


        @worker_shutdown.connect
        def shutdown(sender=None, **kwargs):
            _log("worker_shutdown")


        @task_received.connect
        def received(sender=None, request=None, **kwargs):
            _log("received", request.name, request.id, request.replaced_task_nesting)


        @task_prerun.connect
        def prerun(sender=None, task_id=None, task=None, args=None, kwargs=None, **extra):
            _log("prerun", task.name, task_id, list(args))


        @task_postrun.connect
        def postrun(sender=None, task_id=None, task=None, retval=None, state=None, **extra):
            _log("postrun", task.name, task_id, state)


        @task_success.connect
        def succeeded(sender=None, result=None, **kwargs):
            _log("success", sender.name, sender.request.id, result)


        @task_failure.connect
        def failed(sender=None, task_id=None, exception=None, **kwargs):
            _log("failure", sender.name, task_id, type(exception).__name__)
        """,
    "tasks.py": """
        from jobsapp.celery import group, shared_task


        @shared_task
        def add(x, y):
            return x + y


        @shared_task
        def double(x):
            return 2 * x


        @shared_task
        def collect(values):
            return sorted(values)


        @shared_task(bind=True)
        def double_then_add(self, x, y):
            raise self.replace(double.s(x) | add.s(y))


        @shared_task(bind=True)
        def fan_out(self, count):
            raise self.replace(group(double.s(i) for i in range(count)) | collect.s())


        @shared_task
        def fails():
            raise ValueError("audited")
        """,
}


def _run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 120) -> str:
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert completed.returncode == 0, f"{' '.join(command)} exited {completed.returncode}:\n{completed.stdout}\n{completed.stderr}"
    return completed.stdout


def test_a_fresh_project_runs_the_django_example_tasks_and_celery_style_hooks(tmp_path):
    server = RedisServer().start()
    audit_log = tmp_path / "audit.log"
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT_DIR), "DJANGO_SETTINGS_MODULE": "proj.settings", "AUDIT_LOG": str(audit_log)}
        env.pop("REDIS_URL", None)
        env.pop("DATABASE_URL", None)
        # Given a fresh project with the example's proj/celery.py and demoapp
        _run([sys.executable, "-m", "django", "startproject", "proj", "."], cwd=tmp_path, env=env)
        for name in ("__init__.py", "celery.py"):
            shutil.copy(EXAMPLE / "proj" / name, tmp_path / "proj" / name)
        shutil.copytree(EXAMPLE / "demoapp", tmp_path / "demoapp", ignore=shutil.ignore_patterns("__pycache__"))
        # And our own app, written as a Celery project writes its hooks and tasks
        (tmp_path / "audit").mkdir()
        for name, text in AUDIT_APP.items():
            (tmp_path / "audit" / name).write_text(textwrap.dedent(text))
        with (tmp_path / "proj" / "settings.py").open("a") as settings:
            settings.write(
                textwrap.dedent(f"""
                INSTALLED_APPS += ["jobsapp", "demoapp", "audit"]
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
                from audit.tasks import double_then_add, fails, fan_out
                replaced, fanned, failing = double_then_add.delay(5, 1), fan_out.delay(3), fails.delay()
                print(replaced.get(timeout=30), fanned.get(timeout=30), replaced.id, failing.id)
                try:
                    failing.get(timeout=30)
                except ValueError as error:
                    print("raised", error)
            """)
            output = _run([sys.executable, "manage.py", "shell", "-c", script], cwd=tmp_path, env=env, timeout=120)
        finally:
            os.killpg(worker.pid, 15)
            worker_output = worker.communicate(timeout=60)[0]
        # Then the values are the example's, and debug_task printed its request in the worker
        lines = [line for line in output.split("\n") if line][-5:]  # after the shell's own banner
        assert lines[:2] == ["5 6 6", "1"], output
        name, debug_id = lines[2].split()
        assert name == "new"
        assert "Request: <Context" in worker_output and debug_id in worker_output, worker_output[-3000:]
        # And the tasks that replaced themselves gave their replacements' values, as Celery's do
        values, replaced_id, failing_id = lines[3].rsplit(" ", 2)
        assert values == "11 [0, 2, 4]" and lines[4] == "raised audited", output
        # And the receivers ran where Celery runs them: publish in the caller, the rest in the worker
        audit = [line.split() for line in audit_log.read_text().splitlines()]
        worker_pids = {pid for pid, event, *_ in audit if event == "worker_ready"}  # one per runworkers process
        assert worker_pids and worker_pids == {pid for pid, event, *_ in audit if event == "worker_shutdown"}, audit
        caller_pids = {pid for pid, event, sender, task_id in (entry for entry in audit if entry[1] == "publish") if task_id == replaced_id}
        assert caller_pids and not caller_pids & worker_pids, audit
        ran = [entry[1:] for entry in audit if entry[0] in worker_pids and entry[1] != "publish"]
        assert ["received", "audit.tasks.double_then_add", replaced_id, "0"] in ran, audit
        assert any(entry[:2] == ["received", "audit.tasks.add"] and entry[3] == "1" for entry in ran), audit  # the replacement
        assert ["prerun", "audit.tasks.double_then_add", replaced_id, "[5,", "1]"] in ran, audit
        assert ["postrun", "audit.tasks.double_then_add", replaced_id, "IGNORED"] in ran, audit  # Celery's state for a replaced run
        assert any(entry[:2] == ["success", "audit.tasks.add"] and entry[-1] == "11" for entry in ran), audit
        assert any(entry[:2] == ["success", "audit.tasks.collect"] and entry[-1:] == ["4]"] for entry in ran), audit
        assert ["failure", "audit.tasks.fails", failing_id, "ValueError"] in ran, audit
    finally:
        server.stop()


#: A fresh project's own test of its tasks, written as Celery's testing guide writes one (Celery's
#: pytest plugin, its ``celery_app`` and ``celery_worker`` fixtures, a ``task_received`` receiver
#: connected in the test), with ``celery`` spelled ``jobsapp.celery``.
PROJECT_TEST = """
    from jobsapp.celery.signals import task_received
    from jobsapp.celery.worker import state

    from audit.tasks import double_then_add


    def test_double_then_add_replaces_itself(celery_app, celery_worker):
        received = []

        def on_received(request=None, **kwargs):
            received.append((request.name, request.replaced_task_nesting))

        task_received.connect(on_received)
        try:
            result = double_then_add.delay(5, 1)
            assert result.get(timeout=30) == 11
        finally:
            task_received.disconnect(on_received)
        assert ("audit.tasks.double_then_add", 0) in received
        assert ("audit.tasks.add", 1) in received
        assert sum(state.total_count.values()) >= 2
    """


def test_a_fresh_projects_own_tests_run_its_tasks_on_celerys_pytest_fixtures(tmp_path):
    server = RedisServer().start()
    try:
        audit_log = str(tmp_path / "audit.log")
        env = {**os.environ, "PYTHONPATH": str(ROOT_DIR), "DJANGO_SETTINGS_MODULE": "proj.settings", "AUDIT_LOG": audit_log}
        env.pop("REDIS_URL", None)
        env.pop("DATABASE_URL", None)
        # Given a fresh project with an app written as Celery projects write theirs
        _run([sys.executable, "-m", "django", "startproject", "proj", "."], cwd=tmp_path, env=env)
        (tmp_path / "audit").mkdir()
        for name, text in AUDIT_APP.items():
            (tmp_path / "audit" / name).write_text(textwrap.dedent(text))
        with (tmp_path / "proj" / "settings.py").open("a") as settings:
            settings.write(f'\nINSTALLED_APPS += ["jobsapp", "audit"]\nJOBSAPP = {{"REDIS_URL": "{server.url}"}}\n')
        # And its tests on Celery's pytest plugin, enabled as Celery's docs enable it
        (tmp_path / "conftest.py").write_text('pytest_plugins = ("jobsapp.celery.contrib.pytest",)\n')
        (tmp_path / "pytest.ini").write_text("[pytest]\nDJANGO_SETTINGS_MODULE = proj.settings\n")
        (tmp_path / "test_audit.py").write_text(textwrap.dedent(PROJECT_TEST))
        # When pytest runs them, Then the worker in the test process runs the task and its replacement
        output = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tmp_path, env=env)
        assert "1 passed" in output, output
    finally:
        server.stop()
