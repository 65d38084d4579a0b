"""The engine's exceptions. Each one's docstring is its contract."""

from __future__ import annotations


class JobsError(Exception):
    """Base class of every error the engine raises on purpose."""


class RedisUnavailable(JobsError):
    """Redis did not answer (refused, timed out, loading). Nothing was enqueued.

    Raised by the producing side (``perform_async``, ``client.push``) and by ``jobsapp.api``;
    web views should answer 503. Workers never raise it: they log, back off and retry.
    """


class PayloadTooLarge(JobsError, ValueError):
    """The serialized job exceeds ``MAX_PAYLOAD_BYTES``; it was refused before any Redis write."""


class UnknownJobClass(JobsError, LookupError):
    """A payload names a class that is not a registered job. It is never imported: the job goes
    to the dead set with this message."""


class MalformedPayload(JobsError, ValueError):
    """A queue held something that is not a JSON job object. It goes to the dead set, wrapped so
    its raw text is kept."""


class DuplicateJobName(JobsError):
    """Two different job classes claim the same wire name."""


class JobCancelled(JobsError):
    """Someone cancelled the running job (``jobsapp.api.cancel``, the dashboard's Busy page, ``jobs
    cancel``, Celery's ``revoke(terminate=True)``). Raised inside the job as a timeout is (a sync
    job gets it in its thread the next time it runs Python code; an async job's coroutine is
    cancelled and this raised in its place), it ends the job for good: never retried, not sent to
    the dead set, its features and server middleware told ``cancelled``. Code that catches it (or
    ``Exception``) and carries on keeps running, and ends as its code decides."""

    DEFAULT_MESSAGE = "the job was cancelled"

    def __init__(self, message: str = DEFAULT_MESSAGE) -> None:
        super().__init__(message)


class NoRetryError(JobsError):
    """Raise from ``perform`` to fail the job on purpose: it is counted as failed, its error is
    recorded by middleware, and it is neither retried nor sent to the dead set."""


class JobTimeout(JobsError):
    """The job ran past its ``sidekiq_options(timeout=seconds)``. Raised inside the job (an async
    job is cancelled; a sync job gets it in its thread the next time it runs Python code), it
    fails the job like any exception: retried with ``error_class`` ``jobsapp.errors.JobTimeout``,
    then dead. Code that catches it (or ``Exception``) and carries on keeps running: the timeout
    is not enforced a second time. Constructed without arguments, it carries a default message."""

    DEFAULT_MESSAGE = "the job ran past its timeout"

    def __init__(self, message: str = DEFAULT_MESSAGE) -> None:
        super().__init__(message)


class PoisonJob(JobsError):
    """The job was in flight in a process that died, too many times in a row: the sweeper
    (``jobsapp.worker.recovery``) files it in the dead set with this error instead of running it
    again. Never raised in a job."""


class ReplicationTimeout(JobsError):
    """A push was written to the master, but fewer than ``ENQUEUE_REPLICAS`` replicas confirmed
    it within ``ENQUEUE_REPLICAS_TIMEOUT_SECONDS``. The job is enqueued and will normally run;
    it would be lost only if the master died before replicating it. Pushing it again may run it
    twice. ``jids`` are the jobs of the unconfirmed write."""

    def __init__(self, message: str, *, jids: list[str], replicas_acknowledged: int, replicas_required: int) -> None:
        super().__init__(message)
        self.jids = jids
        self.replicas_acknowledged = replicas_acknowledged
        self.replicas_required = replicas_required


class UnknownShard(JobsError, LookupError):
    """A shard name (``runworkers --shard``, ``jobs --shard``, the dashboard's picker) that
    ``JOBSAPP["SHARDS"]`` does not define. Nothing was read or written."""
