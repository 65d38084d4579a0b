"""``find_job(jid)``: where a job is right now, wherever that is.

Looks in the running jobs first (a job being worked is the most interesting answer), then the
retry, scheduled and dead sets (ZSCAN MATCH on the jid, on the server), then every queue
(LRANGE in chunks, a byte search before any JSON decoding). O(everything) in the worst case: an
operator's tool, not something to call from application code in a loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from .processes import Work, WorkSet
from .queues import Queue
from .records import JobRecord
from .sorted_sets import DeadSet, JobSet, RetrySet, ScheduledSet


@dataclass(frozen=True)
class Location:
    """Where a job was found: ``kind`` is "running", "retry", "scheduled", "dead" or "queue";
    ``name`` is the process identity, set key or queue name."""

    kind: str
    name: str
    record: JobRecord
    work: Work | None = None
    job_set: JobSet | None = None


def find_job(jid: str) -> Location | None:
    """The first place holding ``jid``, or None."""
    if not jid:
        return None
    work = WorkSet.find_job(jid)
    if work is not None:
        return Location("running", work.identity, work.record, work=work)
    job_set: JobSet
    for kind, job_set in (("retry", RetrySet()), ("scheduled", ScheduledSet()), ("dead", DeadSet())):
        entry = job_set.find_job(jid)
        if entry is not None:
            return Location(kind, job_set.name, entry, job_set=job_set)
    for queue in Queue.all():
        record = queue.find_job(jid)
        if record is not None:
            return Location("queue", queue.name, record)
    return None
