"""Task and Event: one user action and the life of each of its jobs.

A ``Task`` groups the jobs one user action started (sign 200 products up, import a file). It keeps
a denormalized count of its events per status, plus ``settled_count`` (events that will not change
again), so the summary a frontend polls is one primary-key read however many jobs the task has.
``revision`` goes up on every change of those counts: it is the summary's ETag.

An ``Event`` is one job (``job_id`` is the jid). ``status`` is one of the documents' five;
``is_final`` tells a settled ``error`` (retries exhausted, dead) from a crash the engine is about to
retry. ``revision`` is the event's compare-and-swap token: every change is
``UPDATE ... WHERE id = %s AND revision = %s``, so two copies of a job racing (at-least-once
delivery) can never both apply a transition, and the task counts move by exactly the rows changed.
The rules of which transition is allowed from where live in ``tracking.recorder``.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
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


#: Status name -> the Task column that counts events in that status.
COUNT_FIELDS: dict[str, str] = {status.value: f"{status.value}_count" for status in EventStatus}


class TaskStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    FINISHED = "finished", "finished"


class TaskManager(models.Manager["Task"]):
    def launch(
        self,
        job_class: type[Job],
        args_list: list[list[Any]],
        *,
        owner: Any = None,
        name: str | None = None,
        then: type[Job] | None = None,
        then_args: list[Any] | None = None,
        batch_size: int = 1000,
    ) -> Task:
        """Create a task with one event per argument list and push one job each (see
        ``tracking.launching.launch``): the jobs reach Redis only after the rows are committed."""
        from .launching import launch

        return launch(job_class, args_list, owner=owner, name=name, then=then, then_args=then_args, batch_size=batch_size)


class Task(models.Model):
    id = models.CharField(primary_key=True, max_length=32, default=new_task_id, editable=False)
    name = models.CharField(max_length=255, help_text="What the task does; by default its job class.")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="tracked_tasks")
    total = models.PositiveIntegerField(default=0)
    enqueue_count = models.PositiveIntegerField(default=0)
    working_count = models.PositiveIntegerField(default=0)
    finish_count = models.PositiveIntegerField(default=0)
    failed_count = models.PositiveIntegerField(default=0)
    error_count = models.PositiveIntegerField(default=0)
    settled_count = models.PositiveIntegerField(default=0, help_text="Events that will not change again.")
    revision = models.PositiveBigIntegerField(default=0)
    # A job pushed into this task once every other job has settled (an export's assembly step).
    then_class = models.CharField(max_length=255, blank=True, default="")
    then_args = models.JSONField(default=list, blank=True)
    then_queued = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TaskManager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"], name="tracking_task_owner_created")]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    @property
    def status(self) -> str:
        if self.finished_at is not None:
            return TaskStatus.FINISHED
        if self.started_at is not None or self.settled_count:
            return TaskStatus.RUNNING
        return TaskStatus.PENDING

    @property
    def counts(self) -> dict[str, int]:
        return {status: getattr(self, field) for status, field in COUNT_FIELDS.items()}

    @property
    def progress(self) -> float:
        """The settled share (finished, failed or dead), 0.0 to 1.0; 1.0 for an empty task."""
        if not self.total:
            return 1.0 if self.finished_at is not None else 0.0
        return min(1.0, self.settled_count / self.total)

    @property
    def etag(self) -> str:
        return f'"{self.id}.{self.revision}"'


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
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.status}"
