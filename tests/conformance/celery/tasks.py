# ruff: noqa: UP030, UP032  (the guide's code, kept as written)
"""The tasks of Celery's user guide (docs/userguide/calling.rst and canvas.rst, see UPSTREAM.md),
ported by changing imports only: ``from celery import Celery`` -> ``from jobsapp.celery import
Celery``. Two errbacks print to a file where the guide prints to stdout or ``/var/errors`` (the
file is ``$CELERY_CONFORMANCE_ERRORS``), so a test can read what the worker called them with."""

import os

from jobsapp.celery import Celery

app = Celery("proj")

ERRORS = os.environ.get("CELERY_CONFORMANCE_ERRORS", os.devnull)


@app.task
def add(x, y):
    return x + y


@app.task
def mul(x, y):
    return x * y


@app.task
def subtract(x, y):
    return x - y


@app.task
def tsum(numbers):
    return sum(numbers)


@app.task
def xsum(numbers):
    return sum(numbers)


@app.task
def raising_task():
    raise ValueError("something something")


@app.task
def fail():
    raise ValueError("fail")


@app.task
def log_error(request, exc, traceback):
    with open(ERRORS, "a") as fh:
        print("--\n\n{0} {1} {2}".format(request.id, exc, traceback), file=fh)


@app.task
def error_handler(request, exc, traceback):
    with open(ERRORS, "a") as fh:
        print("Task {0} raised exception: {1!r}\n{2!r}".format(request.id, exc, traceback), file=fh)


@app.task
def on_chord_error(request, exc, traceback):
    with open(ERRORS, "a") as fh:
        print("Task {0!r} raised error: {1!r}".format(request.id, exc), file=fh)


@app.task
def old_style_errback(task_id):
    """An errback of one argument: Celery pushes it as a task with the failed task's id."""
    with open(ERRORS, "a") as fh:
        print("old-style {0}".format(task_id), file=fh)
    return task_id


@app.task
def reset_buffers():
    return "reset"


@app.task
def exits():
    """A task that calls sys.exit (issue: the caller must not exit when it reads the result)."""
    raise SystemExit(3)


@app.task
def a_set():
    """A value JSON cannot hold (a header part whose chord callback can then never run)."""
    return {1, 2}
