"""``cancel(jid)`` and ``cancel_many(jids)``: stop a running job, or remove a waiting one, for good.

Runs in the caller's thread (a dashboard request, the ``jobs cancel`` command, Celery's
``revoke(terminate=True)``, tracking's task cancel, a user's script). In this order:

1. the request is recorded and published (``jobsapp.cancellation.request``): from this moment
   every worker process knows the jid, so whichever runs the job, now or later (a copy it has
   fetched and not started, one a shutdown puts back and another process takes), interrupts it
   (``JobCancelled`` in its thread, or its coroutine cancelled) and ends it ``CANCELLED`` through
   the door, within a second;
2. a copy waiting in the schedule set, the retry set or a queue is removed by its raw bytes and
   ends ``CANCELLED`` through the door (``endings``) here, in this thread: never run, its unique
   lock released, its batch counting it failed, its record ``failed`` with reason ``cancelled``,
   server middleware (tracking) told ``on_dead`` with reason ``cancelled``. The sets are searched
   before the queues (a due job moves from a set to its queue, never back), and a copy a worker
   fetched first is left to that worker, which cancels it at its start: one ending either way;
3. what was not waiting is looked for among the running jobs (the in-flight lists of reliable
   fetch, which hold a job from the moment it is fetched, and the ``<identity>:work`` hashes,
   which show basic fetch's and Ruby's jobs from their process's next heartbeat).

Each jid gets a ``Cancellation``: ``cancelled`` (it waited: removed and ended here),
``cancelling`` (a process has it: it stops within a second, ``JobCancelled`` delivered the next
time its thread runs Python code: a job inside a blocking C call stops when the call returns, as
with timeouts), ``ended`` (it has ended already: its record or the dead set says how; nothing
changed) or ``not_found`` (neither waiting nor running: it ended already or never existed;
nothing changed). Cancelling twice is harmless: the second call finds nothing waiting, and a
running job is interrupted once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from .. import cancellation, keys, results
from ..connection import as_text, get_redis
from ..ending import Fate
from .guard import translate_errors
from .processes import WorkSet
from .queues import Queue
from .records import JobRecord
from .sorted_sets import DeadSet, JobSet, RetrySet, ScheduledSet

#: Jids whose result record is read to tell ``ended`` from ``not_found`` (one read each).
ENDED_LOOKUPS_MAX = 100


class CancelOutcome(StrEnum):
    """What one cancel did."""

    CANCELLED = "cancelled"  # it was waiting: removed, ended cancelled now
    CANCELLING = "cancelling"  # a worker process has it: it stops within a second
    ENDED = "ended"  # it had ended already: nothing changed
    NOT_FOUND = "not_found"  # neither waiting nor running (ended, or no such job): nothing changed


@dataclass(frozen=True)
class Cancellation:
    """The answer for one jid: the outcome, and where the job was (a queue name, ``schedule``,
    ``retry``, a process identity, or how it ended)."""

    jid: str
    outcome: CancelOutcome
    where: str = ""

    @property
    def message(self) -> str:
        """One sentence for an operator."""
        if self.outcome is CancelOutcome.CANCELLED:
            return f"{self.jid}: removed from {self.where} and cancelled; it will not run"
        if self.outcome is CancelOutcome.CANCELLING:
            return f"{self.jid}: running in {self.where}; it is being cancelled and stops within a second"
        if self.outcome is CancelOutcome.ENDED:
            return f"{self.jid}: already ended ({self.where}); nothing to cancel"
        return f"{self.jid}: not waiting or running (it has ended, or there is no such job); nothing to cancel"


def cancel(jid: str) -> Cancellation:
    """Cancel one job (see the module header)."""
    return cancel_many([jid])[0]


@translate_errors
def cancel_many(jids: Iterable[str]) -> list[Cancellation]:
    """Cancel each of ``jids`` (see the module header); one ``Cancellation`` per distinct jid, in
    the order given."""
    wanted = list(dict.fromkeys(jid for jid in jids if isinstance(jid, str) and jid))
    if not wanted:
        return []
    client = get_redis()
    cancellation.request(client, wanted)
    answers: dict[str, Cancellation] = {}
    for job_set in (ScheduledSet(), RetrySet()):
        _remove_from_set(job_set, wanted, answers)
    for queue in Queue.all():
        _remove_from_queue(queue, [jid for jid in wanted if jid not in answers], answers)
    remaining = {jid for jid in wanted if jid not in answers}
    if remaining:
        for jid, identity in _running(remaining).items():
            answers[jid] = Cancellation(jid, CancelOutcome.CANCELLING, identity)
    ended_lookups = [jid for jid in wanted if jid not in answers][:ENDED_LOOKUPS_MAX]
    for jid in ended_lookups:
        answers[jid] = _ended_or_not_found(jid, single=len(wanted) == 1)
    return [answers.get(jid) or Cancellation(jid, CancelOutcome.NOT_FOUND) for jid in wanted]


def _remove_from_set(job_set: JobSet, wanted: list[str], answers: dict[str, Cancellation]) -> None:
    name = keys.strip_prefix(job_set.name)
    pending = set(wanted) - set(answers)
    if not pending:
        return
    if len(pending) == 1:
        found = job_set.find_job(next(iter(pending)))
        entries = [found] if found is not None else []
    else:
        entries = [entry for entry in job_set.scan() if entry.jid in pending]
    for entry in entries:
        if entry.jid not in answers and job_set.delete(entry, fate=Fate.CANCELLED):
            answers[entry.jid] = Cancellation(entry.jid, CancelOutcome.CANCELLED, name)


def _remove_from_queue(queue: Queue, pending: list[str], answers: dict[str, Cancellation]) -> None:
    if not pending:
        return
    if len(pending) == 1:
        found = queue.find_job(pending[0])
        records = [found] if found is not None else []
    else:
        wanted = set(pending)
        records = [record for record in queue.scan() if record.jid in wanted]
    for record in records:
        if record.jid not in answers and queue.delete(record, fate=Fate.CANCELLED):
            answers[record.jid] = Cancellation(record.jid, CancelOutcome.CANCELLED, f"queue {queue.name}")


def _running(jids: set[str]) -> dict[str, str]:
    """jid -> the identity of the process that has it: the in-flight lists (reliable fetch: a job
    is there from its fetch), then the work hashes (basic fetch, Ruby processes)."""
    found: dict[str, str] = {}
    client = get_redis()
    identities = sorted(as_text(name) for name in client.smembers(keys.INFLIGHT_INDEX))
    if identities:
        pipe = client.pipeline(transaction=False)
        owners = [identity for identity in identities for _ in keys.partitions()]  # one list per partition on a cluster
        for identity in identities:
            for index in keys.partitions():
                pipe.lrange(keys.in_partition(keys.inflight(identity), index), 0, -1)
        for identity, raws in zip(owners, pipe.execute(), strict=True):
            for raw in raws or []:
                jid = JobRecord(raw).jid
                if jid in jids:
                    found.setdefault(jid, identity)
    if len(found) < len(jids):
        for work in WorkSet.all():
            if work.record.jid in jids:
                found.setdefault(work.record.jid, work.identity)
    return found


def _ended_or_not_found(jid: str, *, single: bool) -> Cancellation:
    record = results.get(jid)
    if record is not None and record.status in results.FINISHED_STATUSES:
        how = record.status if not record.reason else f"{record.status}: {record.reason}"
        return Cancellation(jid, CancelOutcome.ENDED, how)
    if single and DeadSet().find_job(jid) is not None:
        return Cancellation(jid, CancelOutcome.ENDED, "in the dead set")
    return Cancellation(jid, CancelOutcome.NOT_FOUND)


__all__ = ["CancelOutcome", "Cancellation", "cancel", "cancel_many"]
