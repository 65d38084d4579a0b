"""The transition table of a tracked job's event: which change may start from which state. Pure:
no database, no Redis (``tracking.recorder`` applies these in SQL).

An event's state is ``(status, is_final)``. Each ``Transition`` names the states it may start
from; one that is not allowed is a no-op. That is what makes recording idempotent: a job that
runs twice (at-least-once delivery) finds its event already ``working`` or already final, and a
late duplicate can never move a final event (``finish``, ``failed``, a dead ``error``) backwards.

A ``Change`` is one transition of one job's event, stamped when it happened, with the messages
it appends; the processor threads build them and ``tracking.writer`` hands them to the recorder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from jobsapp.client import Item

from .models import EventStatus

#: {"at", "status", "message"}, plus "done" and "total" (ints) for report_progress entries.
MessageEntry = dict[str, Any]

ENQUEUE = EventStatus.ENQUEUE.value
WORKING = EventStatus.WORKING.value
FINISH = EventStatus.FINISH.value
FAILED = EventStatus.FAILED.value
ERROR = EventStatus.ERROR.value
CANCELLED = EventStatus.CANCELLED.value

_NOT_FINAL = frozenset((status, False) for status in (ENQUEUE, WORKING, ERROR))
_ANY = frozenset((status.value, final) for status in EventStatus for final in (False, True))


@dataclass(frozen=True)
class Transition:
    """A change an event may go through: to ``to_status`` (None keeps the status) from ``allowed``."""

    name: str
    to_status: str | None
    to_final: bool
    allowed: frozenset[tuple[str, bool]]
    counts_attempt: bool = False


#: The job started running (again, after a retry or a requeue; or a duplicate copy started).
START = Transition("start", WORKING, False, _NOT_FINAL, counts_attempt=True)
#: perform returned.
FINISHED = Transition("finish", FINISH, True, _NOT_FINAL)
#: perform raised the business failure (NoRetryError): final, never retried.
FAILED_ON_PURPOSE = Transition("failed", FAILED, True, _NOT_FINAL)
#: perform crashed; the engine decides next whether it retries (RETRY_SCHEDULED) or not (DEAD).
CRASHED = Transition("error", ERROR, False, _NOT_FINAL)
#: The engine scheduled a retry: back to enqueue, "waiting for retry (n of m)".
RETRY_SCHEDULED = Transition("retry", ENQUEUE, False, _NOT_FINAL)
#: The engine will not run the job again (retries exhausted, dead, unknown class...).
DEAD = Transition("dead", ERROR, True, _NOT_FINAL)
#: Cancelled (jobsapp.api.cancel, a task's cancel): removed while it waited, or stopped while it ran.
CANCEL = Transition("cancel", CANCELLED, True, _NOT_FINAL)
#: Put back unfinished at worker shutdown.
REQUEUED = Transition("requeue", ENQUEUE, False, frozenset({(WORKING, False)}))
#: An operator retries a dead job (admin action): the only way out of a final state.
REOPENED = Transition("reopen", ENQUEUE, False, frozenset({(ERROR, True)}))
#: Progress messages only: the status does not change.
MESSAGES_ONLY = Transition("messages", None, False, _ANY)

#: The most messages an event keeps: the first one (how it started) and the newest ones. A job
#: that reports progress every second for hours would otherwise make every flush rewrite, and
#: every poll download, megabytes.
MAX_MESSAGES = 200


def capped(messages: list[MessageEntry]) -> list[MessageEntry]:
    """``messages`` cut to the first and the newest ``MAX_MESSAGES - 1``."""
    return messages if len(messages) <= MAX_MESSAGES else [messages[0], *messages[-(MAX_MESSAGES - 1) :]]


def message_entry(status: str, message: str, *, at: datetime | None = None) -> MessageEntry:
    return {"at": (at or timezone.now()).isoformat(), "status": status, "message": str(message)}


@dataclass(slots=True)
class Change:
    """One transition to apply to the event of ``job_id``, stamped when it happened.

    ``entries`` (already stamped, e.g. buffered progress lines) and then ``message`` (stamped
    ``at``, with the new status) are appended to the event's messages. ``item`` is the job's
    payload when the event may not exist yet (a job pushed without the client middleware, by
    Ruby or before tracking was installed): the event is then recorded before the transition.
    """

    job_id: str
    transition: Transition
    at: datetime
    message: str | None = None
    entries: Sequence[MessageEntry] = ()
    item: Item | None = None
