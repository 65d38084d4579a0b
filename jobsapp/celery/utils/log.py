"""``get_task_logger`` as Celery's: a logger per module whose records name the running task.

    from jobsapp.celery.utils.log import get_task_logger
    logger = get_task_logger(__name__)

The logger's parent is ``celery.task`` (so a ``LOGGING`` entry for it, or for ``celery``, still
applies), and each record it makes carries ``task_id`` and ``task_name`` ("???" outside a task),
for formats such as Celery's ``[%(task_name)s(%(task_id)s)] %(message)s``.
"""

from __future__ import annotations

import logging

from ..task import current_request

#: The parent of every task logger, as Celery's.
task_logger = logging.getLogger("celery.task")


class TaskContextFilter(logging.Filter):
    """Adds ``task_id`` and ``task_name`` of the task running in the logging thread."""

    def filter(self, record: logging.LogRecord) -> bool:
        running = current_request()
        if running is None:
            record.task_id, record.task_name = "???", "???"
        else:
            task, request = running
            record.task_id, record.task_name = request.id or "???", task.name
        return True


_filter = TaskContextFilter()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` (Celery's ``get_logger``)."""
    return logging.getLogger(name)


def get_task_logger(name: str) -> logging.Logger:
    """The logger ``name``, a child of ``celery.task``, whose records name the running task."""
    if name in ("celery", "celery.task"):
        raise RuntimeError(f"logger name {name!r} is reserved for the task loggers' parents")
    logger = logging.getLogger(name)
    if logger.parent is None or logger.parent is logging.getLogger():
        logger.parent = task_logger
    if _filter not in logger.filters:
        logger.addFilter(_filter)
    return logger
