"""Task and Event: one user action and the life of each of its jobs.

A ``Task`` groups the jobs one user action started (sign 200 products up, import a file). Its
counts per status live off the task row, in ``TaskCounter`` shards: each writer (a worker
process's recording thread, or a thread recording inline) adds its deltas to its own shard row,
so thousands of jobs a second never queue on one row lock (PostgreSQL) and a transaction touches
one small row per task (SQLite). A task has at most ``TRACKING["COUNTER_SHARDS"]`` counter rows,
and ``Task.objects.with_counts()`` sums them in the same query that reads the task: the summary
a frontend polls is one small query however many events the task has. Shard 0 takes what the
enqueue side adds (launch, a joined job, the follow-up job), shards 1.. the transitions.

``progress`` is the settled share plus, while jobs of the task run, the largest fraction each
started and unsettled job reported (``report_progress``), over the total: a bar over long jobs
moves while they run, never goes past 1.0, never goes down (a job waiting for its retry keeps
the most it showed), and a job counts whole once it settles. Reading the fractions is one more
query, made only for a task that has started and has unsettled jobs (the summary of a task not
started yet, or finished, stays one query).

The summary's ETag is the task row's ``revision`` (total, finish) plus the sum of the shards'
``changes`` (every event change adds one): both only grow, so any change gives a new ETag.

An ``Event`` is one job (``job_id`` is the jid). ``status`` is one of the documents' five, or
``cancelled`` (final: the job was cancelled, ``tracking.launching.cancel`` or ``jobsapp.api.cancel``);
``is_final`` tells a settled ``error`` (retries exhausted, dead) from a crash the engine is about to
retry. ``revision`` counts the event's changes. Every change is decided on the event row read
under the writer's lock (SQLite's one writer, PostgreSQL's ``FOR UPDATE``), so two copies of a job
racing (at-least-once delivery) can never both apply a transition, and the counts move in the same
transaction by exactly the events changed. Which transition is allowed from where is
``tracking.transitions``; the SQL that applies them, ``tracking.recorder``; how writes are batched,
``tracking.writer``; what a settled event does to its task, ``tracking.launching``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from django.apps import apps
from django.conf import settings
from django.db import models
from django.db.models import Max, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

if TYPE_CHECKING:
    from jobsapp import Job


def new_task_id() -> str:
    """32 lowercase hex characters: 128 random bits, so task URLs cannot be guessed."""
    return secrets.token_hex(16)


class EventStatus(models.TextChoices):
    ENQUEUE = "enqueue", "enqueue"
    WORKING = "working", "working"
    FINISH = "finish", "finish"
    FAILED = "failed", "failed"
    ERROR = "error", "error"
    CANCELLED = "cancelled", "cancelled"


#: Status name -> the TaskCounter column that counts events in that status.
COUNT_FIELDS: dict[str, str] = {status.value: status.value for status in EventStatus}
#: Every summed TaskCounter column: the six statuses, settled events, and changes (for the ETag).
TALLY_FIELDS: tuple[str, ...] = (*COUNT_FIELDS.values(), "settled", "changes")


class TaskStatus(models.TextChoices):
    LAUNCHING = "launching", "launching"
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    FINISHED = "finished", "finished"
    CANCELLED = "cancelled", "cancelled"


def reported_fraction(entry: dict[str, Any]) -> float | None:
    """The share of its work a job reported with a message (``report_progress``: ``done`` of
    ``total``), clamped to 0.0-1.0; None for a message without one."""
    done, total = entry.get("done"), entry.get("total")
    if type(done) is not int or type(total) is not int or total <= 0:
        return None
    return min(1.0, max(0.0, done / total))


def highest_fraction(messages: list[dict[str, Any]] | None) -> float:
    """The largest fraction a job reported over its messages (0.0 without any): what it counts
    for in its task's progress until it settles, never less than it once showed."""
    return max((fraction for fraction in map(reported_fraction, messages or []) if fraction is not None), default=0.0)


class TaskQuerySet(models.QuerySet["Task"]):
    def with_counts(self) -> TaskQuerySet:
        """Each task with its counter shards summed in the same query (``tally_<field>``)."""
        sums: dict[str, Any] = {f"tally_{field}": Coalesce(Sum(f"counters__{field}"), 0) for field in TALLY_FIELDS}
        return self.annotate(**sums, tally_updated_at=Max("counters__updated_at"))


class TaskManager(models.Manager.from_queryset(TaskQuerySet)):  # type: ignore[misc]
    def launch(
        self,
        job_class: type[Job],
        args_list: list[list[Any]],
        *,
        owner: Any = None,
        name: str | None = None,
        then: type[Job] | None = None,
        then_args: list[Any] | None = None,
        on_complete: type[Job] | None = None,
        on_success: type[Job] | None = None,
        batch_size: int = 1000,
    ) -> Task:
        """Create a task with one event per argument list and push one job each (see
        ``tracking.launching.launch``): the jobs reach Redis only after the rows are committed."""
        task: Task = self._launching().launch(
            job_class,
            args_list,
            owner=owner,
            name=name,
            then=then,
            then_args=then_args,
            on_complete=on_complete,
            on_success=on_success,
            batch_size=batch_size,
        )
        return task

    def add_jobs(self, task: Task | str, job_class: type[Job], args_list: list[list[Any]], *, batch_size: int = 1000) -> list[str]:
        """Add jobs to a task that is still running (see ``tracking.launching.add_jobs``)."""
        jids: list[str] = self._launching().add_jobs(task, job_class, args_list, batch_size=batch_size)
        return jids

    def _launching(self) -> Any:
        """``tracking.launching``, as the app holds it once the registry is ready
        (``TrackingConfig.ready``): the launcher writes these models, so they sit below it and
        reach it through their app rather than by importing it."""
        return cast(Any, apps.get_app_config(self.model._meta.app_label)).launching


class Task(models.Model):
    id = models.CharField(primary_key=True, max_length=32, default=new_task_id, editable=False)
    name = models.CharField(max_length=255, help_text="What the task does; by default its job class.")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="tracked_tasks")
    total = models.PositiveIntegerField(default=0)
    # Jobs of a big launch whose events are still to be written and pushed by its background
    # fan-out (tracking.launching.launch_chunk); the task is "launching" until this reaches 0.
    launching = models.PositiveIntegerField(default=0)
    revision = models.PositiveBigIntegerField(default=0, help_text="Changes of this row (total, finish).")
    # A job pushed into this task once every other job has settled (an export's assembly step).
    then_class = models.CharField(max_length=255, blank=True, default="")
    then_args = models.JSONField(default=list, blank=True)
    then_queued = models.BooleanField(default=False)
    # Batch callbacks: job classes pushed with (task id, counts) once the task finishes, at most
    # once each: on_complete whatever the outcome, on_success when no job failed or errored.
    on_complete_class = models.CharField(max_length=255, blank=True, default="")
    on_success_class = models.CharField(max_length=255, blank=True, default="")
    complete_fired = models.BooleanField(default=False)
    success_fired = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When someone cancelled the task (``tracking.launching.cancel``): no job joins it any more.
    cancelled_at = models.DateTimeField(null=True, blank=True)

    objects = TaskManager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"], name="tracking_task_owner_created")]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    def refresh_from_db(self, *args: Any, **kwargs: Any) -> None:
        """Reload the row, and the counts on next use (annotated ones are dropped as stale)."""
        super().refresh_from_db(*args, **kwargs)
        for name in [name for name in self.__dict__ if name.startswith("tally_") or name in ("_tally", "_running_fraction")]:
            del self.__dict__[name]

    @property
    def tally(self) -> dict[str, Any]:
        """The summed counter shards: from ``with_counts()`` when the task was read with it, else
        read once (one aggregate query) and kept until ``refresh_from_db``."""
        tally = self.__dict__.get("_tally")
        if tally is None:
            if "tally_changes" in self.__dict__:
                tally = {field: self.__dict__[f"tally_{field}"] for field in (*TALLY_FIELDS, "updated_at")}
            else:
                sums: dict[str, Any] = {field: Coalesce(Sum(field), 0) for field in TALLY_FIELDS}
                tally = TaskCounter.objects.filter(task_id=self.pk).aggregate(**sums, updated_at=Max("updated_at"))
            self.__dict__["_tally"] = tally
        return tally

    @property
    def counts(self) -> dict[str, int]:
        tally = self.tally
        return {status: int(tally[field]) for status, field in COUNT_FIELDS.items()}

    def event_count(self, statuses: Sequence[str] = ()) -> int:
        """How many events of the task are in ``statuses`` (all, when empty), from its counters
        (which always equal what its events say, so no COUNT over them), less the jobs its
        background launch has not written yet."""
        counts = self.counts
        wanted = list(statuses) or list(counts)
        unwritten = self.launching if EventStatus.ENQUEUE in wanted else 0
        return max(0, sum(counts.get(status, 0) for status in wanted) - unwritten)

    @property
    def settled_count(self) -> int:
        """Events that will not change again (finished, failed on purpose, dead)."""
        return int(self.tally["settled"])

    @property
    def last_updated_at(self) -> Any:
        """When the task or any of its events last changed."""
        counted = self.tally["updated_at"]
        return max(self.updated_at, counted) if counted is not None else self.updated_at

    @property
    def status(self) -> str:
        if self.cancelled_at is not None:  # from the cancel on; finished_at says when its last job stopped
            return TaskStatus.CANCELLED
        if self.finished_at is not None:
            return TaskStatus.FINISHED
        if self.launching:
            return TaskStatus.LAUNCHING
        if self.started_at is not None or self.settled_count:
            return TaskStatus.RUNNING
        return TaskStatus.PENDING

    @property
    def running_fraction(self) -> float:
        """The fractions reported by the task's started, unsettled jobs (each its largest),
        summed, in jobs; 0.0 for a task not started, finished or fully settled (no query then).
        Read once per instance."""
        cached = self.__dict__.get("_running_fraction")
        if cached is not None:
            return float(cached)
        fraction = 0.0
        if self.finished_at is None and self.started_at is not None and self.settled_count < self.total:
            rows = Event.objects.filter(task_id=self.pk, is_final=False, attempts__gt=0).values_list("messages", flat=True)
            fraction = sum(highest_fraction(list(messages or [])) for messages in rows)
        self.__dict__["_running_fraction"] = fraction
        return fraction

    @property
    def progress(self) -> float:
        """The settled share (finished, failed or dead) plus the running jobs' reported
        fractions, over the total: 0.0 to 1.0; 1.0 for an empty finished task."""
        if not self.total:
            return 1.0 if self.finished_at is not None else 0.0
        return min(1.0, (self.settled_count + self.running_fraction) / self.total)

    @property
    def etag(self) -> str:
        return f'"{self.id}.{self.revision + int(self.tally["changes"])}"'


class TaskCounter(models.Model):
    """One shard of a task's counts: deltas added by one writer (see the module header).

    A shard's columns may go negative (an event enqueued in shard 0 starts working in shard 3);
    only their sums over the task mean something.
    """

    id = models.BigAutoField(primary_key=True)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="counters", db_index=False)
    shard = models.PositiveSmallIntegerField()
    enqueue = models.BigIntegerField(default=0)
    working = models.BigIntegerField(default=0)
    finish = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    error = models.BigIntegerField(default=0)
    cancelled = models.BigIntegerField(default=0)
    settled = models.BigIntegerField(default=0, help_text="Events that will not change again.")
    changes = models.BigIntegerField(default=0, help_text="Event changes counted here (part of the ETag).")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "shard"], name="tracking_counter_task_shard")]

    def __str__(self) -> str:
        return f"{self.task_id} shard {self.shard}"


class Event(models.Model):
    id = models.BigAutoField(primary_key=True)
    job_id = models.CharField(max_length=64, unique=True)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events", db_index=False)
    job_class = models.CharField(max_length=255)
    queue = models.CharField(max_length=255, default="default")
    status = models.CharField(max_length=16, choices=EventStatus.choices, default=EventStatus.ENQUEUE)
    is_final = models.BooleanField(default=False)
    params = models.JSONField(default=dict, blank=True, help_text='The job\'s arguments: {"args": [...], "kwargs": {...}}')
    messages = models.JSONField(default=list, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    revision = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["task", "id"], name="tracking_event_task"),
            models.Index(fields=["task", "status", "id"], name="tracking_event_task_status"),
            # The started, unsettled events whose reported fractions a task's progress adds
            # (Task.running_fraction): a handful per task at any time, however big the task.
            models.Index(fields=["task"], condition=models.Q(is_final=False, attempts__gt=0), name="tracking_event_task_started"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.status}"
