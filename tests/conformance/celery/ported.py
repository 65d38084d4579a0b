"""The tasks of Celery's calling and canvas guides (``docs/userguide/calling.rst`` and
``canvas.rst`` in the pinned Celery sdist), assembled at run time into ``celery_guides.tasks``.

The module holds the guides' blocks that define tasks, taken by number with their first line
checked and their ``celery`` imports changed to ``jobsapp.celery``, and between them our code:
``app``, the helper tasks the guides call but never define (``mul``, ``xsum``, ``fail``, ...), and
one piece of wiring: the guides' errbacks print (or write under ``/var/errors``), and here what
they print is appended to ``$CELERY_CONFORMANCE_ERRORS`` too, the file the tests read. The
package goes on ``sys.path`` here and on ``PYTHONPATH`` for the workers a test starts (they
install it as an app, settings.py). Without the Celery sdist, the suite is skipped, or fails under CI=true.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

from tests.conformance import upstream
from tests.conformance.upstream import Block, Substitution

PACKAGE = "celery_guides"
CALLING = "docs/userguide/calling.rst"
CANVAS = "docs/userguide/canvas.rst"

PREAMBLE = '''
import builtins
import os

from jobsapp.celery import Celery

# given: the guides' app
app = Celery("proj")

ERRORS = os.environ.get("CELERY_CONFORMANCE_ERRORS", os.devnull)


def print(*values, file=None, **options):
    """given: what an errback prints to stdout goes to $CELERY_CONFORMANCE_ERRORS as well."""
    if file is None:
        with open(ERRORS, "a") as errors:
            builtins.print(*values, file=errors, **options)
    builtins.print(*values, file=file, **options)
'''

GIVEN_TASKS = '''
# given: the tasks the guides call without defining them


@app.task
def mul(x, y):
    return x * y


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
def reset_buffers():
    return "reset"


@app.task
def old_style_errback(task_id):
    """An errback of one argument: Celery pushes it as a task with the failed task's id."""
    print("old-style {0}".format(task_id))
    return task_id


@app.task
def exits():
    """A task that calls sys.exit (the caller must not exit when it reads the result)."""
    raise SystemExit(3)


@app.task
def a_set():
    """A value JSON cannot hold (a header part whose chord callback can then never run)."""
    return {1, 2}
'''

#: (document, block) in module order.
BLOCKS: list[tuple[str, Block]] = [
    (CANVAS, Block(64, "@app.task")),  # add and tsum
    (CALLING, Block(5, "@app.task")),  # error_handler
    (CANVAS, Block(13, "@app.task", stop_before="partial = subtract.s(10)")),  # subtract, without the calls after it
    (
        CANVAS,
        Block(
            47,
            "import os",
            [
                Substitution("from proj.celery import app", "# given: app, above"),
                Substitution("os.path.join('/var/errors', request.id)", "ERRORS", reason="one file the tests read"),
            ],
        ),
    ),  # log_error
    (CANVAS, Block(70, "@app.task")),  # on_chord_error
]


def module_text(root: Path) -> str:
    documents = {path: upstream.code_blocks(upstream.read(root, path)) for path in (CALLING, CANVAS)}
    parts = [upstream.celery_imports_to_jobsapp(block.take(documents[path], origin=f"celery {path}")) for path, block in BLOCKS]
    return "\n\n".join([PREAMBLE.strip("\n") + "\n", *parts, GIVEN_TASKS.strip("\n") + "\n"])


def ported_dir() -> Path:
    """The directory holding ``celery_guides`` (on ``sys.path`` once this module is imported)."""
    root = upstream.require(upstream.CELERY)
    return upstream.materialize("celery-guides", {f"{PACKAGE}/__init__.py": "", f"{PACKAGE}/tasks.py": module_text(root)})


DIRECTORY = str(ported_dir())
if DIRECTORY not in sys.path:
    sys.path.insert(0, DIRECTORY)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [DIRECTORY, os.environ.get("PYTHONPATH")]))
tasks: ModuleType = importlib.import_module(f"{PACKAGE}.tasks")

add = tasks.add
tsum = tasks.tsum
subtract = tasks.subtract
error_handler = tasks.error_handler
log_error = tasks.log_error
on_chord_error = tasks.on_chord_error
mul = tasks.mul
xsum = tasks.xsum
raising_task = tasks.raising_task
fail = tasks.fail
reset_buffers = tasks.reset_buffers
old_style_errback = tasks.old_style_errback
exits = tasks.exits
a_set = tasks.a_set
