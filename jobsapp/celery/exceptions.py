"""Celery's exceptions, as ``jobsapp.celery`` raises them. Each docstring says what becomes of the job."""

from __future__ import annotations

from ..errors import JobsError, NoRetryError


class CeleryError(JobsError):
    """Base class of the Celery-compatible layer's errors."""


class Retry(CeleryError):
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
