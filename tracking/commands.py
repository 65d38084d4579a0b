"""Tracking's subcommands of ``manage.py jobs`` (the ``jobs`` command lists them through the app
config's ``jobs_subcommands()``): ``task-cancel ID`` cancels a tracked task as the API, the
progress page and the admin do (``tracking.launching.cancel``). Thin: parse, call, say."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from jobsapp import RedisUnavailable

from . import launching
from .models import Task


def _task_cancel_arguments(parser: CommandParser) -> None:
    parser.add_argument("task_id", metavar="ID", help="the task's id")


def _task_cancel(options: dict[str, Any]) -> tuple[dict[str, Any], str]:
    task_id = options["task_id"]
    try:
        outcome = launching.cancel(task_id, by="the jobs command")
    except Task.DoesNotExist:
        raise CommandError(f"no task {task_id!r}") from None
    except RedisUnavailable as error:  # the task is cancelled; what was not reached is cancelled by the next call
        raise CommandError(f"task {task_id} cancelled, but not all of its jobs could be reached: {error}") from error
    document = {
        "task": task_id,
        "already_cancelled": not outcome.first,
        "removed": outcome.removed + outcome.settled_here,
        "stopping": outcome.cancelling,
    }
    if outcome.first:
        text = f"Cancelled task {task_id}: {document['removed']} waiting job(s) removed, {outcome.cancelling} running job(s) being stopped."
    else:
        text = f"Task {task_id} was cancelled already; {document['removed'] + outcome.cancelling} job(s) left were cancelled now."
    return document, text


#: ``jobs task-cancel ID``, as ``jobsapp.management.commands.jobs.Subcommand``.
TASK_CANCEL = (
    "task-cancel",
    "cancel a tracked task: its waiting jobs removed, its running ones stopped",
    _task_cancel_arguments,
    _task_cancel,
)
