"""Launching a task: its rows first, its jobs after commit, all in bulk.

``launch(JobClass, args_list)`` runs in the caller's thread:

1. one transaction inserts the Task and one Event per job (``bulk_create``, a few INSERTs for
   10,000 jobs), each event under a jid generated here;
2. ``transaction.on_commit`` then pushes every job with ``push_bulk`` (one pipeline per 1,000
   jobs). A worker can therefore never take a job whose event is not committed yet.

The engine's ``push_bulk`` generates the jids itself; to push the jobs under the jids already
recorded, ``push_recorded`` opens a context the tracking client middleware reads: for each item of
the task it hands out the next recorded jid (checked against the item's arguments, so a job an
earlier middleware dropped cannot shift the others) instead of recording a new event. The same
path re-pushes a follow-up job and the admin's retries.

If Redis refuses the push, the task's unpushed events are settled as dead ``error`` events with
the reason (the caller's transaction is committed by then), and RedisUnavailable propagates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from contextvars import ContextVar
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from jobsapp import RedisUnavailable, client, registry
from jobsapp.payload import check_json_native, new_jid

from .conf import tracking_settings
from .models import Event, Task, TaskCounter

if TYPE_CHECKING:
    from jobsapp import Job

Item = dict[str, Any]
#: (jid, args, kwargs or None) of one recorded job.
RecordedJob = tuple[str, list[Any], dict[str, Any] | None]


class RecordedJobs:
    """The jids recorded for one push of a task's jobs, handed out in order."""

    def __init__(self, task_id: str, jobs: Sequence[RecordedJob]) -> None:
        self.task_id = task_id
        self._pending: deque[RecordedJob] = deque(jobs)

    def claim(self, item: Item) -> str | None:
        """The recorded jid for ``item``: the next one whose arguments match (jobs skipped on the
        way were dropped by an earlier client middleware). None when none is left."""
        args = item.get("args")
        kwargs = item.get("kwargs") or None
        while self._pending:
            job_id, recorded_args, recorded_kwargs = self._pending.popleft()
            if recorded_args == args and (recorded_kwargs or None) == kwargs:
                return job_id
        return None


_recorded: ContextVar[RecordedJobs | None] = ContextVar("tracking_recorded_jobs", default=None)


def recorded_jid_for(item: Item) -> str | None:
    """For the client middleware: the already-recorded jid of this item, if it belongs to the
    push in progress; None means "a job of its own, record its enqueue"."""
    batch = _recorded.get()
    if batch is None or item.get("task_id") != batch.task_id:
        return None
    return batch.claim(item)


def _template(wire_name: str, task_id: str, queue: str) -> tuple[type[Job] | None, Item]:
    """A Sidekiq item template for ``wire_name`` with the class's options, as ``Job.set`` builds it."""
    if registry.is_registered(wire_name):
        job_class = registry.lookup(wire_name)
        options = job_class.get_sidekiq_options()
        options.pop("class_name", None)
        return job_class, {**options, "class": wire_name, "use_task_event": True, "task_id": task_id}
    return None, {"class": wire_name, "queue": queue, "use_task_event": True, "task_id": task_id}


def push_recorded(
    task_id: str, wire_name: str, jobs: Sequence[RecordedJob], *, queue: str = "default", batch_size: int = 1000
) -> list[str | None]:
    """Push jobs whose events are recorded and committed, under their recorded jids.

    Jobs without keyword arguments go in one ``push_bulk``; the others one ``push`` each.
    Returns the jids in order (None where a client middleware stopped a job; its event is
    settled as a dead error then).
    """
    from . import recorder

    job_class, template = _template(wire_name, task_id, queue)
    token = _recorded.set(RecordedJobs(task_id, jobs))
    pushed: list[str | None] = []
    try:
        if all(not kwargs for _, _, kwargs in jobs):
            pushed = client.push_bulk({**template, "args": [list(args) for _, args, _ in jobs]}, batch_size=batch_size, job_class=job_class)
        else:
            for job_id, args, kwargs in jobs:
                item = {**template, "args": list(args), "jid": job_id}
                if kwargs:
                    item["kwargs"] = kwargs
                pushed.append(client.push(item, job_class=job_class))
    except RedisUnavailable as exc:
        # Some batches may be in Redis, the rest are not; the events cannot tell which, so all
        # of them are settled with the reason. Jobs that did get through still run (tracking
        # ignores them: their events are final).
        recorder.settle_unpushed((job_id for job_id, _, _ in jobs[len(pushed) :] or jobs), f"could not be enqueued: {exc}")
        raise
    finally:
        _recorded.reset(token)
    expected = [job_id for job_id, _, _ in jobs]
    stopped = [job_id for job_id, jid in zip(expected, pushed, strict=False) if jid != job_id]
    if stopped:
        recorder.settle_unpushed(stopped, "not enqueued: stopped by a client middleware")
    return pushed


def launch(
    job_class: type[Job],
    args_list: Sequence[Sequence[Any]],
    *,
    owner: Any = None,
    name: str | None = None,
    then: type[Job] | None = None,
    then_args: Sequence[Any] | None = None,
    batch_size: int = 1000,
) -> Task:
    """Create a task of ``len(args_list)`` jobs of ``job_class`` for ``owner`` and push them after commit.

    ``then`` is a job pushed into the same task once every other job has settled (an export's
    assembly step); the task finishes when that job does. Arguments must be JSON-native: they are
    checked before anything is written.
    """
    from . import recorder

    jobs_args = [list(args) for args in args_list]
    check_json_native(jobs_args, "args_list")
    check_json_native(list(then_args or []), "then_args")
    wire_name = job_class.wire_name()
    queue = str(job_class.get_sidekiq_options().get("queue") or "default")
    timestamp = timezone.now()
    jobs: list[RecordedJob] = [(new_jid(), args, None) for args in jobs_args]
    with transaction.atomic():
        task = Task.objects.create(
            name=name or wire_name,
            owner=owner,
            total=len(jobs),
            then_class=then.wire_name() if then is not None else "",
            then_args=list(then_args or []),
            created_at=timestamp,
            updated_at=timestamp,
            finished_at=timestamp if not jobs and then is None else None,
        )
        TaskCounter.objects.create(task=task, shard=recorder.ENQUEUE_SHARD, enqueue=len(jobs), updated_at=timestamp)
        Event.objects.bulk_create(
            [
                Event(
                    job_id=job_id,
                    task=task,
                    job_class=wire_name,
                    queue=queue,
                    params={"args": args},
                    created_at=timestamp,
                    updated_at=timestamp,
                )
                for job_id, args, _ in jobs
            ],
            batch_size=tracking_settings.LAUNCH_BATCH_SIZE,
        )
        if jobs:
            transaction.on_commit(partial(push_recorded, task.pk, wire_name, jobs, queue=queue, batch_size=batch_size))
        elif then is not None:
            recorder.queue_follow_up(task.pk, now=timestamp)
    task.refresh_from_db()
    return task


def retry_errored(task: Task, *, by: str = "an operator") -> int:
    """Push again, under the same jids, every job of ``task`` that ended in a final ``error``.

    Each event goes back to ``enqueue`` (the task is no longer finished) in one transaction; the
    jobs are pushed after it commits. Returns how many jobs were retried.
    """
    from . import recorder

    by_class: dict[tuple[str, str], list[RecordedJob]] = {}
    now = timezone.now()
    with transaction.atomic():
        candidates = list(
            Event.objects.filter(task=task, status=recorder.ERROR, is_final=True)
            .order_by("id")
            .values_list("job_id", "job_class", "queue", "params")
        )
        # One batch: the events are locked together, in id order, like any writer's.
        message = f"retried by {by}"
        reopened = recorder.apply([recorder.Change(job_id, recorder.REOPENED, now, message=message) for job_id, *_ in candidates])
        for (job_id, job_class, queue, params), changed in zip(candidates, reopened, strict=True):
            if changed:
                params = params or {}
                job = (job_id, list(params.get("args") or []), params.get("kwargs") or None)
                by_class.setdefault((job_class, queue), []).append(job)
        for (wire_name, queue), jobs in by_class.items():
            transaction.on_commit(partial(push_recorded, task.pk, wire_name, jobs, queue=queue))
    return sum(len(jobs) for jobs in by_class.values())
