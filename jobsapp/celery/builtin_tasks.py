"""Celery's built-in tasks that the canvas pushes: ``celery.map`` and ``celery.starmap``.

Registered when ``jobsapp.celery`` is imported, so every worker that runs Celery-style tasks runs
them too. Each is one job that calls the named task here, in order, for every item (Celery's
``xmap`` / ``xstarmap``); its value is the list of values. The named task is looked up in this
process: a payload naming a task this worker does not define fails the job (NotRegistered: dead
set, FAILURE in its result), and nothing is imported because a payload named it.
"""

from __future__ import annotations

from typing import Any

from .canvas import lookup_task
from .decorators import shared_task
from .task import Task


def celery_map(task: dict[str, Any], it: list[Any]) -> list[Any]:
    """``[task(item) for item in it]``."""
    function = lookup_task(str(task["task"]))
    return [function(item) for item in it]


def celery_starmap(task: dict[str, Any], it: list[Any]) -> list[Any]:
    """``[task(*item) for item in it]``."""
    function = lookup_task(str(task["task"]))
    return [function(*item) for item in it]


map_task: Task[Any, Any] = shared_task(name="celery.map")(celery_map)
starmap_task: Task[Any, Any] = shared_task(name="celery.starmap")(celery_starmap)


def celery_accumulate(*args: Any, index: int | None = None) -> Any:
    """Its arguments (or the one at ``index``): the body ``Task.replace`` gives a group (Celery's ``celery.accumulate``)."""
    return args[index] if index is not None else list(args)


accumulate_task: Task[Any, Any] = shared_task(name="celery.accumulate")(celery_accumulate)
