"""Celery's exceptions, as ``jobsapp.celery`` raises them. Each docstring says what becomes of the job."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured as DjangoImproperlyConfigured

from ..errors import JobsError, JobTimeout, NoRetryError


class CeleryError(JobsError):
    """Base class of the Celery-compatible layer's errors."""


class TaskPredicate(CeleryError):
    """Base class of the exceptions a task raises to tell the worker what to do with it."""


class Retry(TaskPredicate):
    """Raised by ``task.retry()``: the job goes to the retry set and runs again after ``countdown``
    seconds (the request's ``retries`` one higher). Never catch it in the task."""

    def __init__(self, message: str | None = None, exc: BaseException | None = None, countdown: float | None = None) -> None:
        self.exc = exc
        self.reported_exception = exc  # what the result records while the task waits (Celery's RETRY result)
        self.countdown = countdown
        super().__init__(message or (f"Retry in {countdown:g}s: {exc!r}" if countdown is not None else f"Retry: {exc!r}"))


class MaxRetriesExceededError(CeleryError):
    """``task.retry()`` was called with no retries left and no ``exc``: the job fails for good."""


class TimeoutError(CeleryError):
    """``AsyncResult.get(timeout=...)`` gave up waiting; the job itself is unaffected."""


class TaskRevokedError(NoRetryError, CeleryError):
    """The task was revoked or had expired before it started: it does not run, and is not retried."""


class TaskFailure(CeleryError):
    """``AsyncResult.get()`` of a failed task whose exception class is not loaded in this process
    (nothing is imported because a result named it): ``error_class`` and the message instead."""

    def __init__(self, error_class: str, message: str) -> None:
        self.error_class = error_class
        super().__init__(f"{error_class}: {message}" if message else error_class)


class ChordError(CeleryError):
    """A chord's header task failed for good: the chord's callback does not run, and its result says so."""


class Ignore(TaskPredicate):
    """Raised by a task: the job is acknowledged and nothing more is recorded for it (no SUCCESS,
    no FAILURE, no hooks, nothing that follows it runs); a state it stored with ``update_state``
    stays what ``AsyncResult`` reports."""


class Reject(TaskPredicate):
    """Raised by a task to reject its message. ``requeue=False``: the job goes to the dead set (the
    dead letter place) and its result is FAILURE with the reason. ``requeue=True``: the job goes
    back to its queue at once (through the retry set: ``request.retries`` is one higher) and runs
    again with ``request.delivery_info["redelivered"]`` true; no final result is stored."""

    def __init__(self, reason: Any = None, requeue: bool = False) -> None:
        self.reason = reason
        self.requeue = requeue
        super().__init__(reason, requeue)

    def __str__(self) -> str:
        return str(self.reason) if self.reason is not None else "rejected"

    def __repr__(self) -> str:
        return f"reject requeue={self.requeue}: {self.reason}"


class SoftTimeLimitExceeded(JobTimeout, CeleryError):
    """Raised inside a task that ran past its ``soft_time_limit``: the task may catch it and clean
    up. Uncaught, the task fails (dead set, FAILURE) unless ``autoretry_for`` retries it."""


class TimeLimitExceeded(JobTimeout, CeleryError):
    """The task ran past its ``time_limit`` (the engine's ``timeout``): it fails (dead set, FAILURE).
    Raised in the task's thread like the soft limit, so code that catches every exception can
    outlive it; ``JOBSAPP["TIMEOUT_HARD_LIMIT_SECONDS"]`` then stops the worker process."""


class ImproperlyConfigured(DjangoImproperlyConfigured, CeleryError):
    """A task or canvas that cannot run as declared (Celery's ``ImproperlyConfigured``; also
    Django's, so code catching either sees it)."""


class NotProvided(NotImplementedError, AttributeError):
    """A part of Celery this layer does not have (stamping, a broker connection): a
    ``NotImplementedError`` saying what to do instead, and an ``AttributeError`` for code that
    probes with ``hasattr``."""
