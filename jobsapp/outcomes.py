"""The engine's named vocabularies: where a failed job went, and why a job was buried or put back.

One module for the words that several modules make (``retry``, ``processor``, ``recovery``,
``manager``) and others read (``ServerMiddleware.on_dead`` / ``on_requeue`` hooks, ``results``,
``tracking.middleware``). Every enum is a ``StrEnum``: a member *is* its string, so the values
written to Redis, logs and hooks stay byte-identical to the plain strings they replace, and a
hook comparing ``reason == "poison"`` keeps working.

No thread, no Redis: names only.
"""

from __future__ import annotations

from enum import StrEnum


class OutcomeKind(StrEnum):
    """Where a failed job went (``retry.Outcome.kind``)."""

    RETRY = "retry"  # in the retry set, to run again at ``run_at``
    DEAD = "dead"  # in the dead set
    DISCARDED = "discarded"  # dropped: acknowledged, in no set
    LOST = "lost"  # no longer in this process's in-flight list (recovered elsewhere): nothing written


class DeadReason(StrEnum):
    """Why a job will not run again (``on_dead``'s ``reason``)."""

    RETRIES_EXHAUSTED = "retries_exhausted"
    KILLED = "killed"  # sidekiq_retry_in answered "kill"
    DISCARDED = "discarded"  # sidekiq_retry_in answered "discard"
    RETRY_DISABLED = "retry_disabled"  # retry: false
    NO_RETRY = "no_retry"  # the job raised NoRetryError
    UNKNOWN_CLASS = "unknown_class"
    MALFORMED = "malformed"
    POISON = "poison"  # it kept crashing its worker
    EXPIRED = "expired"  # fetched past its expires_at: dropped, never run
    DELETED = "deleted"  # an operator deleted it while it waited (a queue, the schedule or the retry set)
    OPERATOR_KILLED = "operator_killed"  # an operator moved it to the dead set while it waited
    REVOKED = "revoked"  # revoked before it started (Celery's revoke)
    CANCELLED = "cancelled"  # cancelled by someone: stopped while it ran, or removed while it waited (jobsapp.api.cancel)


class RequeueReason(StrEnum):
    """Why an unfinished job went back to its queue (``on_requeue``'s ``reason``)."""

    QUIET = "quiet"
    SHUTDOWN = "shutdown"
    ERROR = "error"
    RECONCILE = "reconcile"
    RECOVERED = "recovered"  # from a dead process's in-flight list
    OVER_LIMIT = "over_limit"  # its queue or limiter had no slot
    OPERATOR = "operator"  # an operator moved it from the schedule, retry or dead set to its queue now
