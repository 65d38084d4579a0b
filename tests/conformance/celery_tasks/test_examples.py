"""Celery's own examples (examples/tutorial, examples/next-steps, examples/django), from the pinned
Celery sdist with imports changed only (ported_examples.py), run by a real runworkers on a real Redis; the values asserted are those the
Celery documentation gives for them (docs/getting-started/first-steps-with-celery.rst,
next-steps.rst, examples/django/README.rst).

Each example is laid out as upstream (``proj``, ``demoapp``, the tutorial's ``tasks`` module are
top-level names): the worker gets the example's directory on ``PYTHONPATH`` and its packages in
``INSTALLED_APPS`` (``$CONFORMANCE_APPS``, tests/conformance/celery_tasks/settings.py), and this
process imports them from the same directory, as ``manage.py shell`` would.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from types import ModuleType

import pytest

from jobsapp import registry
from jobsapp.celery import chain, chord, group
from jobsapp.celery.task import _tasks as defined_tasks
from tests.conformance.celery_tasks.ported_examples import examples_dir
from tests.workers import ROOT_DIR, WorkerProcess, wait_until

EXAMPLES = examples_dir()
SETTINGS = "tests.conformance.celery_tasks.settings"
#: The docs' get(timeout=1) waits, made generous: the machine may be busy; a hang still fails.
TIMEOUT = 15

pytestmark = pytest.mark.slow


def _example_env(example: str, apps: list[str], **extra: str) -> dict[str, str]:
    return {
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES / example), str(ROOT_DIR)]),
        "CONFORMANCE_APPS": ",".join(apps),
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        **extra,
    }


def _forget(*prefixes: str) -> None:
    for name in [name for name in sys.modules if name.split(".")[0] in prefixes]:
        del sys.modules[name]


@pytest.fixture
def example_path(monkeypatch) -> Iterator[callable]:
    """Import an example's modules in this process, from its directory; forgotten afterwards."""
    imported: list[str] = []

    def importer(example: str, module: str) -> ModuleType:
        monkeypatch.syspath_prepend(str(EXAMPLES / example))
        top = module.split(".")[0]
        _forget(top)
        imported.append(top)
        return importlib.import_module(module)

    yield importer
    _forget(*imported)


@pytest.fixture
def free_name() -> Iterator[callable]:
    """Lend a task name another module of this process took (the tasks guide's ``tasks.add``
    is the tutorial's name): the other task comes back afterwards."""
    taken: list[tuple[str, object, object]] = []

    def free(name: str) -> None:
        if registry.is_registered(name):
            taken.append((name, registry.lookup(name), defined_tasks.get(name)))
            registry.unregister(name)

    yield free
    for name, job_class, task in taken:
        registry.unregister(name)
        registry.register(job_class, name)
        defined_tasks[name] = task


def test_the_tutorial(redis_server, example_path, free_name):
    # first-steps-with-celery.rst: tasks.py, imports changed
    free_name("tasks.add")
    tasks = example_path("tutorial", "tasks")
    assert tasks.add.name == "tasks.add"
    with WorkerProcess(["-c", "2"], _example_env("tutorial", ["tasks"]), redis_url=redis_server.url):
        result = tasks.add.delay(4, 4)
        assert result.get(timeout=TIMEOUT) == 8
        assert result.ready() and result.successful()
        # "result.get(propagate=False)" and "result.traceback" of a failed call
        failed = tasks.add.delay(4, "4")
        assert isinstance(failed.get(timeout=TIMEOUT, propagate=False), TypeError)
        assert "TypeError" in failed.traceback


def test_next_steps(redis_server, example_path):
    # next-steps.rst with examples/next-steps/proj, imports changed
    tasks = example_path("next-steps", "proj.tasks")
    app = importlib.import_module("proj.celery").app
    add, mul, xsum = tasks.add, tasks.mul, tasks.xsum
    env = _example_env("next-steps", ["proj"])
    # Calling tasks: add(2, 2) runs here
    assert add(2, 2) == 4
    queued_later = add.apply_async((2, 2), queue="lopri", countdown=10)
    assert queued_later.state == "PENDING"
    with WorkerProcess(["-c", "4", "-q", "default", "-q", "lopri", "-q", "hipri"], env, redis_url=redis_server.url):
        assert add.delay(2, 2).get(timeout=TIMEOUT) == 4
        assert add.apply_async((2, 2)).get(timeout=TIMEOUT) == 4
        assert add.apply_async((2, 2), queue="hipri").get(timeout=TIMEOUT) == 4
        res = add.delay(2, 2)
        assert res.get(timeout=TIMEOUT) == 4 and isinstance(res.id, str)
        # A failing call: get() raises the task's TypeError; propagate=False returns it
        res = add.delay(2, "2")
        with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \+: 'int' and 'str'"):
            res.get(timeout=TIMEOUT)
        assert repr(res.get(propagate=False)) == "TypeError(\"unsupported operand type(s) for +: 'int' and 'str'\")"
        assert res.failed() and not res.successful() and res.state == "FAILURE"
        assert app.AsyncResult("this-id-does-not-exist").state == "PENDING"
        # Signatures
        assert add.s(2, 2).delay().get(timeout=TIMEOUT) == 4
        assert add.s(2).delay(8).get(timeout=TIMEOUT) == 10
        # The primitives
        assert group(add.s(i, i) for i in range(10))().get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
        assert chain(add.s(4, 4) | mul.s(8))().get(timeout=TIMEOUT) == 64
        assert (add.s(4, 4) | mul.s(8))().get(timeout=TIMEOUT) == 64
        assert chord((add.s(i, i) for i in range(10)), xsum.s())().get(timeout=TIMEOUT) == 90
        assert (group(add.s(i, i) for i in range(10)) | xsum.s())().get(timeout=TIMEOUT) == 90
        # And the countdown call ran on the lopri queue once its 10 s were up
        assert queued_later.get(timeout=TIMEOUT) == 4


@pytest.fixture
def django_example_database(tmp_path) -> str:
    """A database migrated for the Django example (demoapp's Widget), as its README's setup does."""
    url = f"sqlite:///{tmp_path / 'example.sqlite3'}"
    env = {**os.environ, **_example_env("django", ["proj", "demoapp"]), "DATABASE_URL": url}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0", "--skip-checks"], cwd=ROOT_DIR, env=env, check=True, timeout=300)
    return url


@pytest.mark.django_db(transaction=True)  # delay_on_commit outside a transaction: pushed at once
def test_the_django_example(redis_server, redis, settings, monkeypatch, example_path, django_example_database):
    # examples/django: proj/celery.py (with debug_task) and demoapp/tasks.py, imports changed,
    # in this process as in the worker (demoapp installed, as the example's settings do)
    monkeypatch.syspath_prepend(str(EXAMPLES / "django"))
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "demoapp"]
    demoapp = example_path("django", "demoapp.tasks")
    proj = example_path("django", "proj")
    path = django_example_database.removeprefix("sqlite:///")
    with sqlite3.connect(path) as database:
        database.execute("INSERT INTO demoapp_widget (id, name) VALUES (1, 'old')")
    env = _example_env("django", ["proj", "demoapp"], DATABASE_URL=django_example_database)
    with WorkerProcess(["-c", "4"], env, redis_url=redis_server.url) as worker:
        # README "Running a task": add(2, 3) gives 5 (delay_on_commit returns None, in Celery as here)
        assert demoapp.add.delay_on_commit(2, 3) is None
        assert demoapp.add.delay(2, 3).get(timeout=TIMEOUT) == 5
        assert demoapp.mul.delay(2, 3).get(timeout=TIMEOUT) == 6
        assert demoapp.xsum.delay([1, 2, 3]).get(timeout=TIMEOUT) == 6
        assert demoapp.count_widgets.delay().get(timeout=TIMEOUT) == 1
        assert demoapp.rename_widget.delay(1, "new").get(timeout=TIMEOUT) is None
        with sqlite3.connect(path) as database:
            assert database.execute("SELECT name FROM demoapp_widget WHERE id = 1").fetchone() == ("new",)
        # debug_task prints its request in the worker; ignore_result=True stores nothing
        debug = proj.celery_app.tasks["proj.celery.debug_task"].delay()
        wait_until(lambda: "Request: <Context" in worker.output and debug.id in worker.output, timeout_seconds=TIMEOUT)
        assert debug.state == "PENDING"
        # error_task: autoretry_for=(Exception,), retry_kwargs countdown 10 minutes: RETRY, next in 600 s
        error = demoapp.error_task.delay()
        wait_until(lambda: error.state == "RETRY", timeout_seconds=TIMEOUT)
        assert repr(error.result) == "Exception('Test error')"
        score = redis.zscore("retry", next(raw for raw in redis.zrange("retry", 0, -1) if error.id.encode() in raw))
        assert 590 <= score - time.time() <= 601
        # error_backoff_test: retry_backoff=5 without jitter: the first retry 5 s later, the second 10 s
        backoff = demoapp.error_backoff_test.delay()
        wait_until(lambda: backoff.state == "RETRY", timeout_seconds=TIMEOUT)
        first = redis.zscore("retry", next(raw for raw in redis.zrange("retry", 0, -1) if backoff.id.encode() in raw))
        assert 3 <= first - time.time() <= 5.5
