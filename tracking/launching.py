"""A task's lifecycle: launching it, adding to it, finishing it, and every push that brings.

The one module of tracking that pushes jobs (through ``jobsapp.client``; the job's wire name,
options and queue come from ``client.job_template``, its jid from ``client.new_jid``). The rows
are written by ``tracking.recorder`` (SQL only) inside the transactions opened here.

``launch(JobClass, args_list)`` runs in the caller's thread. A task of up to
``TRACKING["LAUNCH_INLINE_JOBS"]`` jobs (1,000) is launched there:

1. one transaction inserts the Task and one Event per job (``bulk_create``), each event under a
   jid generated here;
2. ``transaction.on_commit`` then pushes every job with ``push_bulk`` (one pipeline per 1,000
   jobs). A worker can therefore never take a job whose event is not committed yet.

A bigger task is fanned out in the background, so the caller waits for one INSERT and a push of
a few small jobs whatever the size (writing and pushing 100,000 jobs inline took 17-27 s):

1. the caller's transaction inserts the Task with ``launching`` = its job count (its status is
   ``launching``, its counts say every job waits) and pushes, after commit (or through the
   outbox, in that transaction, when ``JOBSAPP["OUTBOX"]`` is on), one ``LaunchChunk`` job
   (``tracking/jobs.py``) per ``LAUNCH_CHUNK_JOBS`` jobs, carrying their jids and arguments, to
   the jobs' queue;
2. a worker runs each chunk (``launch_chunk``): one transaction lowers the task's ``launching``
   by the chunk's size and inserts its events; after commit it pushes the chunk's jobs. The task
   is ``pending`` (or ``running``) once every chunk has done so.

A chunk is exact per jid under at-least-once delivery: its events are inserted in one
transaction with the task row's update, so a second run of it (the worker died before acking
it) hits the unique jid, writes nothing, and pushes the chunk's jobs again: a job whose push was
lost is pushed, one already pushed runs twice as any redelivered job may, its event recorded
once. If Redis is down while a chunk pushes, the chunk job fails and is retried like any job.
If it is down at the caller's commit (no outbox), the task's events are written as dead
``error`` events with the reason, and RedisUnavailable propagates, as for a small task.

The engine's ``push_bulk`` generates the jids itself; to push the jobs under the jids already
recorded, ``push_recorded`` opens a context the tracking client middleware reads: for each item of
the task it hands out the next recorded jid (checked against the item's arguments, so a job an
earlier middleware dropped cannot shift the others) instead of recording a new event. The same
path pushes a follow-up job, the admin's retries and jobs added to a running task.

With the engine's transactional outbox on (``JOBSAPP["OUTBOX"]``, ``jobsapp.outbox``), each of
those after-commit pushes is an outbox entry written in the same transaction as its events
(``push_after_commit``, kind ``tracking.push_recorded``): a committed task's jobs are then never
lost. Redis down at commit leaves the entry to the relay of ``runworkers``, which pushes it under
the same recorded jids once Redis answers; the events wait as ``enqueue`` meanwhile, and nothing
is raised into the committing code. Without the outbox, if Redis refuses the push, the task's
unpushed events are settled as dead ``error`` events with the reason (``settle_unpushed``; the
caller's transaction is committed by then), and RedisUnavailable propagates.

Recording a job's transitions (``apply``; ``record`` for one) goes through here too, because a
settled event may finish its task. A task is finished once its settled events reach its total.
The statement that counts a batch (``tracking.recorder``) returns each task's settled events as
its transaction sees them; a task complete in that view is finished in the same transaction,
after its row is locked and read again (a job may have joined meanwhile). That view is exact on
SQLite (one writer at a time). On PostgreSQL two processes settling a task's last events
concurrently each see only their own, so the tasks a batch leaves incomplete are checked again
after its commit: the one that commits last sees both. The recording thread's batches on
PostgreSQL (``single_trip.write``, or ``recorder.write_committed`` for the batches that need their
events read first) read that progress only after their commit, in the same round trip, and
finish the tasks complete then in a transaction of their own, before their threads go on (so
before the jobs are acknowledged). Finishing writes ``finished_at`` (once:
``WHERE finished_at IS NULL``) and fires the batch callbacks (``fire_callbacks``), or, when the
task has a follow-up job (``then_class``), adds that job to the task and pushes it after commit
(``queue_follow_up``). A duplicate run that finds its event already final checks again, which
covers a process that died between its commit and that check.
"""

from __future__ import annotations

import itertools
import json
import logging
import secrets
from collections import deque
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from jobsapp import Job, RedisUnavailable, api, client, jobs_settings, outbox
from jobsapp.client import Item, check_json_native, compact_json, new_jid

from . import recorder, single_trip
from .conf import tracking_settings
from .errors import TaskCancelled
from .models import Event, Task, TaskCounter
from .recorder import ENQUEUE_SHARD, RecordedJob
from .transitions import CANCEL, DEAD, ERROR, REOPENED, Change, Transition

logger = logging.getLogger("tracking.launching")


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


# --- recording transitions, and finishing the tasks they settle ---------------------------


def record(
    job_id: str,
    transition: Transition,
    *,
    message: str | None = None,
    entries: Sequence[dict[str, Any]] = (),
    now: datetime | None = None,
    item: Item | None = None,
) -> bool:
    """Apply ``transition`` to the event of ``job_id`` now, in the caller's thread (and in its
    transaction, if any); True when the event changed.

    False when there is no such event or the transition is not allowed from its current state:
    nothing is written.
    """
    change = Change(job_id, transition, now or timezone.now(), message=message, entries=entries, item=item)
    return apply([change])[0]


def apply(changes: Sequence[Change], *, shard: int | None = None) -> list[bool]:
    """Apply ``changes`` in order, in one transaction (the caller's, if it has one), and finish
    the tasks they complete; for each change, True when it changed its event. Counts move in
    ``shard`` (default: the thread's)."""
    if not changes:
        return []
    shard = recorder.thread_shard() if shard is None else shard
    if recorder.can_write_committed():
        # PostgreSQL outside a transaction (the recording thread): committed in one round trip
        # when the database can decide every change (single_trip), else in two; then the tasks
        # found complete after that commit are finished as settle_check does.
        statuses = single_trip.open_statuses(changes)
        if statuses is not None and single_trip.available():
            written = single_trip.write(changes, shard, statuses)
            if written.complete:
                with transaction.atomic():
                    _settle([task.task_id for task in written.complete], written.now)
            results = written.results
            if written.leftover:  # events to record first: the slower path, after that commit
                redone = _apply_in_transaction([changes[index] for index in written.leftover], shard)
                for index, result in zip(written.leftover, redone, strict=True):
                    results[index] = result
            return results
        committed = recorder.write_committed(changes, shard)
        if committed is not None:
            if committed.complete:
                with transaction.atomic():
                    _settle([task.task_id for task in committed.complete], committed.now)
            return committed.results
    return _apply_in_transaction(changes, shard)


def _apply_in_transaction(changes: Sequence[Change], shard: int) -> list[bool]:
    """``apply`` in the caller's transaction, or in one of its own: the events read, then written."""
    # Inside the caller's transaction, check there too: its commit may come much later (or, in a
    # test, never).
    nested = connection.in_atomic_block
    with transaction.atomic():
        written = recorder.write(changes, shard)
        # Complete as this transaction sees it: lock and look again before finishing.
        recheck = _settle([task.task_id for task in written.complete], written.now) if written.complete else set()
        recheck |= written.unsure | written.duplicates_of
        if recheck:
            if nested or not connection.features.has_select_for_update:
                _settle(recheck, written.now)
            else:
                transaction.on_commit(lambda: settle_check(recheck), robust=True)
    return written.results


def _finish(task: recorder.TaskProgress, now: datetime) -> None:
    """Finish a complete task (its row locked by this transaction), or add its follow-up job."""
    if task.then_class and not task.then_queued and not recorder.is_cancelled(task.task_id):
        queue_follow_up(task.task_id, now=now)
    elif recorder.mark_finished(task.task_id, now) and task.has_callbacks:
        fire_callbacks(task.task_id)  # on_complete / on_success, at most once each


def _settle(task_ids: Iterable[str], now: datetime) -> set[str]:
    """Finish (or add the follow-up job to) each of ``task_ids`` whose events have all settled, in
    the caller's transaction; returns the ones still unfinished."""
    unfinished: set[str] = set()
    for task in recorder.progress(sorted(task_ids)):
        if not task.complete:
            unfinished.add(task.task_id)
            continue
        if connection.features.has_select_for_update:
            # Complete as far as this transaction sees: lock the row, then look again (a new
            # statement sees whatever committed meanwhile: a job joining, a reopen). SQLite has
            # nothing to lock: this transaction is its one writer.
            recorder.lock_task(task.task_id)
            again = recorder.progress([task.task_id])
            if not again or not again[0].complete:
                unfinished.update(row.task_id for row in again)
                continue
            task = again[0]
        _finish(task, now)
    return unfinished


def settle_check(task_ids: Iterable[str], *, now: datetime | None = None) -> None:
    """Finish the tasks among ``task_ids`` whose events have all settled (own transaction, only
    when one looks complete)."""
    complete = [task.task_id for task in recorder.progress(sorted(task_ids)) if task.complete]
    if complete:
        with transaction.atomic():
            _settle(complete, now or timezone.now())


def queue_follow_up(task_id: str, *, now: datetime | None = None) -> str | None:
    """Once every event of the task has settled, add its ``then_class`` job and push it after commit.

    Happens once per task, however many last events race (``recorder.claim_follow_up``). Returns
    the new jid, or None when it is not time yet (or already done).
    """
    timestamp = now or timezone.now()
    claimed = recorder.claim_follow_up(task_id, timestamp)
    if claimed is None:
        return None
    wire_name, args = claimed
    template = client.job_template(wire_name)
    job: RecordedJob = (new_jid(), args, None)
    recorder.add_events(task_id, wire_name, template.queue, [job], timestamp)
    push_after_commit(task_id, wire_name, [job])
    return job[0]


def settle_unpushed(job_ids: Iterable[str], reason: str) -> int:
    """Mark recorded events whose job never reached Redis as dead errors; returns how many."""
    now = timezone.now()
    return sum(apply([Change(job_id, DEAD, now, message=reason) for job_id in job_ids]))


# --- pushing a task's jobs --------------------------------------------------------------------


#: The outbox kind of a task's recorded jobs (``push_after_commit``), pushed by ``_push_outboxed``.
OUTBOX_KIND = "tracking.push_recorded"


def push_after_commit(
    task_id: str, wire_name: str, jobs: Sequence[RecordedJob], *, queue: str | None = None, batch_size: int = 1000
) -> None:
    """Push recorded jobs once the current transaction commits: through the engine's outbox when
    it is on (an entry written in this transaction), else with ``transaction.on_commit``."""
    if not jobs:
        return
    if outbox.enabled():
        arguments = {
            "task_id": task_id,
            "wire_name": wire_name,
            "jobs": [list(job) for job in jobs],
            "queue": queue,
            "batch_size": batch_size,
        }
        outbox.defer(OUTBOX_KIND, arguments, jid=jobs[0][0], jobs=len(jobs))
        return
    transaction.on_commit(partial(push_recorded, task_id, wire_name, jobs, queue=queue, batch_size=batch_size))


def _push_outboxed(arguments: dict[str, Any]) -> None:
    """An outbox entry of ``push_after_commit``, at its commit or from the relay. RedisUnavailable
    propagates and settles nothing: the entry waits and is pushed again under the same jids."""
    jobs: list[RecordedJob] = [(str(job_id), list(args), kwargs or None) for job_id, args, kwargs in arguments["jobs"]]
    push_recorded(
        arguments["task_id"], arguments["wire_name"], jobs, queue=arguments.get("queue"), batch_size=int(arguments.get("batch_size", 1000)),
        settle_on_outage=False,
    )  # fmt: skip


outbox.register(OUTBOX_KIND, _push_outboxed)


def push_recorded(
    task_id: str,
    wire_name: str,
    jobs: Sequence[RecordedJob],
    *,
    queue: str | None = None,
    batch_size: int = 1000,
    settle_on_outage: bool = True,
) -> list[str | None]:
    """Push jobs whose events are recorded and committed, under their recorded jids, to their
    class's queue (``queue``, the one recorded, for a class this process does not know).

    Jobs without keyword arguments go in one ``push_bulk``; the others one ``push`` each.
    Returns the jids in order (None where a client middleware stopped a job; its event is
    settled as a dead error then). When Redis is unavailable, the events are settled as dead
    errors (unless ``settle_on_outage`` is False: an outbox entry or a chunk job that will push
    them again) and RedisUnavailable propagates.
    """
    template = client.job_template(wire_name)
    queue = template.queue if template.job_class is not None or not queue else queue
    base: Item = {**template.options, "class": wire_name, "queue": queue, "use_task_event": True, "task_id": task_id}
    token = _recorded.set(RecordedJobs(task_id, jobs))
    pushed: list[str | None] = []
    try:
        if all(not kwargs for _, _, kwargs in jobs):
            bulk = {**base, "args": [list(args) for _, args, _ in jobs]}
            pushed = client.push_bulk(bulk, batch_size=batch_size, job_class=template.job_class)
        else:
            for job_id, args, kwargs in jobs:
                item = {**base, "args": list(args), "jid": job_id}
                if kwargs:
                    item["kwargs"] = kwargs
                pushed.append(client.push(item, job_class=template.job_class))
    except RedisUnavailable as exc:
        # Some batches may be in Redis, the rest are not; the events cannot tell which, so all
        # of them are settled with the reason (unless an outbox entry will push them again).
        # Jobs that did get through still run (tracking ignores them: their events are final).
        if settle_on_outage:
            settle_unpushed((job_id for job_id, _, _ in jobs[len(pushed) :] or jobs), f"could not be enqueued: {exc}")
        raise
    finally:
        _recorded.reset(token)
    expected = [job_id for job_id, _, _ in jobs]
    stopped = [job_id for job_id, jid in zip(expected, pushed, strict=False) if jid != job_id]
    if stopped:
        settle_unpushed(stopped, "not enqueued: stopped by a client middleware")
    return pushed


def _check_arguments(jobs_args: list[list[Any]]) -> None:
    """Raise as ``check_json_native`` does unless every argument list is JSON-native.

    Fast path: the lists equal themselves once encoded and decoded (C code; walking 100,000
    argument lists in Python took 0.3 s); only a mismatch is walked, for the error's message.
    (A subclass of a JSON type, an ``IntEnum``, passes as its value, as ``json`` writes it.)
    """
    try:
        if json.loads(json.dumps(jobs_args, allow_nan=False)) == jobs_args:
            return
    except (TypeError, ValueError, RecursionError):  # not JSON: walk them for the message
        pass
    check_json_native(jobs_args, "args_list")


def _new_jids(count: int) -> list[str]:
    """``count`` jids (24 hex characters, 96 random bits each, as ``new_jid``) from one read of
    the system's random source."""
    text = secrets.token_hex(12 * count)
    return [text[start : start + 24] for start in range(0, 24 * count, 24)]


def launch(
    job_class: type[Job],
    args_list: Sequence[Sequence[Any]],
    *,
    owner: Any = None,
    name: str | None = None,
    then: type[Job] | None = None,
    then_args: Sequence[Any] | None = None,
    on_complete: type[Job] | None = None,
    on_success: type[Job] | None = None,
    batch_size: int = 1000,
) -> Task:
    """Create a task of ``len(args_list)`` jobs of ``job_class`` for ``owner`` and push them after commit.

    ``then`` is a job pushed into the same task once every other job has settled (an export's
    assembly step); the task finishes when that job does. ``on_complete`` and ``on_success`` are
    batch callbacks (``fire_callbacks``): pushed with ``(task_id, counts)`` when the task finishes.
    Arguments must be JSON-native: they are checked before anything is written.
    """
    from .checks import missing_middlewares

    missing = [line for line in missing_middlewares() if "CLIENT_MIDDLEWARE" in line]
    if missing:  # nothing written: without it every job would be recorded as "not enqueued"
        raise ImproperlyConfigured(
            "Task.objects.launch needs the tracking client middleware (system check tracking.E001): add " + "; ".join(missing)
        )
    jobs_args = [list(args) for args in args_list]
    _check_arguments(jobs_args)
    check_json_native(list(then_args or []), "then_args")
    template = client.job_template(job_class)
    timestamp = timezone.now()
    jobs: list[RecordedJob] = list(zip(_new_jids(len(jobs_args)), jobs_args, itertools.repeat(None)))
    background = len(jobs) > int(tracking_settings.LAUNCH_INLINE_JOBS)
    with transaction.atomic():
        task = Task.objects.create(
            name=name or template.wire_name,
            owner=owner,
            total=len(jobs),
            launching=len(jobs) if background else 0,
            then_class=then.wire_name() if then is not None else "",
            then_args=list(then_args or []),
            on_complete_class=_callback_name(on_complete, "on_complete"),
            on_success_class=_callback_name(on_success, "on_success"),
            created_at=timestamp,
            updated_at=timestamp,
            finished_at=timestamp if not jobs and then is None else None,
        )
        TaskCounter.objects.create(task=task, shard=ENQUEUE_SHARD, enqueue=len(jobs), updated_at=timestamp)
        if background:
            _fan_out(task.pk, template.wire_name, template.queue, jobs)
        elif jobs:
            recorder.add_events(task.pk, template.wire_name, template.queue, jobs, timestamp, counted=False)
            push_after_commit(task.pk, template.wire_name, jobs, batch_size=batch_size)
        elif then is not None:
            queue_follow_up(task.pk, now=timestamp)
        else:
            fire_callbacks(task.pk)
    task.refresh_from_db()
    return task


#: The wire name of the job that writes and pushes one chunk of a big task (tracking/jobs.py).
LAUNCH_CHUNK = "tracking.jobs.LaunchChunk"


def _chunks(jobs: Sequence[RecordedJob]) -> Iterable[str]:
    """``jobs`` as JSON texts of ``[[jid, args], ...]``, at most ``LAUNCH_CHUNK_JOBS`` jobs each
    and under half of ``JOBSAPP["MAX_PAYLOAD_BYTES"]`` (a chunk too big is halved until it fits;
    one job bigger than that is a chunk alone). A chunk job carries its chunk as one string, so
    pushing it does not walk every argument again (``launch`` checked them)."""
    limit = (int(jobs_settings.MAX_PAYLOAD_BYTES) or 1 << 40) // 2
    size = max(1, int(tracking_settings.LAUNCH_CHUNK_JOBS))
    pending = [jobs[start : start + size] for start in range(0, len(jobs), size)]
    pending.reverse()
    while pending:
        part = pending.pop()
        text = compact_json([[job_id, args] for job_id, args, _ in part], allow_nan=True)
        if len(text.encode()) > limit and len(part) > 1:
            half = len(part) // 2
            pending += [part[half:], part[:half]]
            continue
        yield text


def _fan_out(task_id: str, wire_name: str, queue: str, jobs: Sequence[RecordedJob]) -> None:
    """Push, after the caller's transaction commits, one ``LaunchChunk`` job per chunk of
    ``jobs`` (``launch_chunk`` runs it). With the outbox on, the push is written in that
    transaction, so a committed task is never left without its chunks."""
    chunk_class = client.job_template(LAUNCH_CHUNK).job_class
    if chunk_class is None:  # tracking/jobs.py not loaded: tracking is not in INSTALLED_APPS
        raise ImproperlyConfigured("Task.objects.launch needs the tracking app in INSTALLED_APPS (its LaunchChunk job)")
    chunks = [[task_id, wire_name, queue, text] for text in _chunks(jobs)]
    if outbox.enabled():
        chunk_class.set(queue=queue, on_commit=True).perform_bulk(chunks)
    else:
        transaction.on_commit(partial(_push_chunks, chunk_class, queue, chunks))


def _push_chunks(chunk_class: type[Job], queue: str, chunks: list[list[Any]]) -> None:
    """After commit: push the chunk jobs. If Redis refuses them, no job of the task can run:
    its events are written as dead errors with the reason, and RedisUnavailable propagates."""
    try:
        chunk_class.set(queue=queue).perform_bulk(chunks)
    except RedisUnavailable as exc:
        for task_id, wire_name, _, text in chunks:
            jobs: list[RecordedJob] = [(str(job_id), list(args), None) for job_id, args in json.loads(text)]
            if _write_chunk(str(task_id), str(wire_name), queue, jobs):
                settle_unpushed([job_id for job_id, _, _ in jobs], f"could not be enqueued: {exc}")
        raise


def _write_chunk(task_id: str, wire_name: str, queue: str, jobs: Sequence[RecordedJob]) -> bool:
    """Insert the events of one chunk and take it off the task's ``launching`` count, in one
    transaction; True when this call wrote them, False when an earlier run did (or the task is
    gone)."""
    now = timezone.now()
    try:
        with transaction.atomic():
            # The task row first, then the events: the enqueue side's lock order.
            if not Task.objects.filter(pk=task_id, launching__gte=len(jobs)).update(
                launching=F("launching") - len(jobs), revision=F("revision") + 1, updated_at=now
            ):
                return False
            recorder.add_events(task_id, wire_name, queue, jobs, now, counted=False)
    except IntegrityError:
        # An event of this chunk exists: an earlier run wrote them all (one transaction), and
        # this one changed nothing. (Or the task was deleted meanwhile: nothing to push then.)
        return False
    return True


def launch_chunk(task_id: str, wire_name: str, queue: str, chunk: str) -> int:
    """Run one ``LaunchChunk`` job of a big task: write the events of ``chunk`` (the JSON text of
    ``[[jid, args], ...]``) and push its jobs under those jids; returns how many were pushed.

    Exact per jid when run again (see the module header): the events are written once, the
    pushes are repeated (at-least-once). A chunk of a deleted task pushes nothing; a chunk of a
    cancelled task (``cancel``) settles its events ``cancelled`` and pushes nothing.
    """
    jobs: list[RecordedJob] = [(str(job_id), list(args), None) for job_id, args in json.loads(chunk)]
    if not jobs:
        return 0
    if not _write_chunk(task_id, wire_name, queue, jobs) and not Event.objects.filter(job_id=jobs[0][0], task_id=task_id).exists():
        return 0  # the task is gone
    if recorder.is_cancelled(task_id):  # cancelled while it launched: its jobs are cancelled unpushed
        now = timezone.now()
        apply([Change(job_id, CANCEL, now, message="cancelled before it was enqueued") for job_id, _, _ in jobs])
        settle_check([task_id], now=now)
        return 0
    pushed = push_recorded(task_id, wire_name, jobs, queue=queue, settle_on_outage=False)
    return sum(jid is not None for jid in pushed)


def _callback_name(job_class: type[Job] | None, what: str) -> str:
    if job_class is None:
        return ""
    if not (isinstance(job_class, type) and issubclass(job_class, Job)):
        raise TypeError(f"{what} must be a Job class, not {job_class!r}")
    return job_class.wire_name()


def fire_callbacks(task_id: str) -> None:
    """The batch callbacks of a task that just finished, in the transaction that finished it.

    ``on_complete`` fires the first time the task finishes, whatever its jobs' outcomes;
    ``on_success`` the first time it finishes with no failed and no errored job (a task whose
    errored jobs are retried and then succeed fires it then). Each is claimed by a conditional
    UPDATE, so of any number of racing finishers one pushes it, once, after commit, with the
    arguments ``(task_id, {"total", "finish", "failed", "error", "cancelled"})``. A cancelled task
    fires ``on_complete`` once its last job stopped, never ``on_success``.
    """
    row = Task.objects.filter(pk=task_id).values_list("on_complete_class", "on_success_class", "complete_fired", "success_fired").first()
    if row is None or not (row[0] or row[1]):
        return
    on_complete, on_success, complete_fired, success_fired = row
    task = Task.objects.get(pk=task_id)
    counts = task.counts
    summary = {
        "total": task.total,
        "finish": counts["finish"],
        "failed": counts["failed"],
        "error": counts["error"],
        "cancelled": counts["cancelled"],
    }
    fire: list[str] = []
    if on_complete and not complete_fired and Task.objects.filter(pk=task_id, complete_fired=False).update(complete_fired=True):
        fire.append(on_complete)
    succeeded = summary["failed"] == 0 and summary["error"] == 0 and summary["cancelled"] == 0 and task.cancelled_at is None
    if on_success and succeeded and not success_fired and Task.objects.filter(pk=task_id, success_fired=False).update(success_fired=True):
        fire.append(on_success)
    for wire_name in fire:
        transaction.on_commit(partial(_push_callback, wire_name, task_id, summary))


def _push_callback(wire_name: str, task_id: str, summary: dict[str, int]) -> None:
    """After the commit that claimed it. Redis refusing the push loses this callback (it is
    claimed): logged as an error naming the task, rather than raised into the committing code."""
    try:
        job_class = client.job_template(wire_name).job_class
        if job_class is not None:
            job_class.perform_async(task_id, summary)
        else:  # a class this process does not know (a Ruby worker's, or renamed): pushed by name
            client.push({"class": wire_name, "args": [task_id, summary]})
    except RedisUnavailable as exc:
        logger.error("task %s: its %s callback could not be pushed and will not run: %s", task_id, wire_name, exc)


def add_jobs(task: Task | str, job_class: type[Job], args_list: Sequence[Sequence[Any]], *, batch_size: int = 1000) -> list[str]:
    """Add jobs of ``job_class`` to a running task: its total grows, it is unfinished again, and
    the jobs are pushed after commit (as ``launch`` does). Returns their jids.

    Call it while the task runs, typically from one of its own jobs (whose unsettled event keeps
    the task from finishing meanwhile): callbacks that already fired do not fire again.
    """
    task_id = task.pk if isinstance(task, Task) else str(task)
    jobs_args = [list(args) for args in args_list]
    check_json_native(jobs_args, "args_list")
    template = client.job_template(job_class)
    timestamp = timezone.now()
    jobs: list[RecordedJob] = [(new_jid(), args, None) for args in jobs_args]
    if not jobs:
        return []
    with transaction.atomic():
        # The task row first, then the events, then shard 0: the enqueue side's lock order.
        if not Task.objects.filter(pk=task_id, cancelled_at__isnull=True).update(
            total=F("total") + len(jobs), finished_at=None, revision=F("revision") + 1, updated_at=timestamp
        ):
            if Task.objects.filter(pk=task_id).exists():
                raise TaskCancelled(f"task {task_id} was cancelled: no job may join it")
            raise Task.DoesNotExist(f"no task {task_id!r}")
        recorder.add_events(task_id, template.wire_name, template.queue, jobs, timestamp)
        push_after_commit(task_id, template.wire_name, jobs, batch_size=batch_size)
    return [job_id for job_id, _, _ in jobs]


def retry_errored(task: Task, *, by: str = "an operator") -> int:
    """Push again, under the same jids, every job of ``task`` that ended in a final ``error``.

    Each event goes back to ``enqueue`` (the task is no longer finished) in one transaction; the
    jobs are pushed after it commits. Returns how many jobs were retried.
    """
    by_class: dict[tuple[str, str], list[RecordedJob]] = {}
    now = timezone.now()
    if recorder.is_cancelled(task.pk):
        raise TaskCancelled(f"task {task.pk} was cancelled: its jobs are not retried")
    with transaction.atomic():
        dead = Event.objects.filter(task=task, status=ERROR, is_final=True).order_by("id")
        candidates = list(dead.values_list("job_id", "job_class", "queue", "params"))
        # One batch: the events are locked together, in id order, like any writer's.
        message = f"retried by {by}"
        reopened = apply([Change(job_id, REOPENED, now, message=message) for job_id, *_ in candidates])
        for (job_id, wire_name, queue, params), changed in zip(candidates, reopened, strict=True):
            if changed:
                params = params or {}
                job = (job_id, list(params.get("args") or []), params.get("kwargs") or None)
                by_class.setdefault((wire_name, queue), []).append(job)
        for (wire_name, queue), jobs in by_class.items():
            push_after_commit(task.pk, wire_name, jobs, queue=queue)
    return sum(len(jobs) for jobs in by_class.values())


# --- cancelling a task ---------------------------------------------------------------------


@dataclass(frozen=True)
class TaskCancellation:
    """What ``cancel`` did: whether this call cancelled the task (False: it was cancelled
    already), and how many of its unsettled jobs were removed while they waited, are being
    stopped where they run, or were found nowhere (their events settled ``cancelled`` here)."""

    task_id: str
    first: bool
    removed: int
    cancelling: int
    settled_here: int


def cancel(task: Task | str, *, by: str = "an operator") -> TaskCancellation:
    """Cancel a task: no job may join it any more (``TaskCancelled``), and every job of it not
    settled yet is cancelled through ``jobsapp.api.cancel_many``: a waiting one is removed (its
    event settles ``cancelled`` through the engine's door and tracking's middleware, and here as
    well), a running one is stopped by its worker within a second (its worker records
    ``cancelled``), one found nowhere (never pushed, lost, or ending right now) settles
    ``cancelled`` here unless its own end came first. The task's status is ``cancelled`` from now
    on; it finishes (``finished_at``, ``on_complete``) once its last job stopped, and then
    ``finish + failed + error + cancelled == total``. Idempotent: a second call cancels what is
    still unsettled (nothing, once the first took effect) and reports ``first=False``.
    """
    task_id = task.pk if isinstance(task, Task) else str(task)
    now = timezone.now()
    with transaction.atomic():
        if not Task.objects.filter(pk=task_id).exists():
            raise Task.DoesNotExist(f"no task {task_id!r}")
        first = bool(
            Task.objects.filter(pk=task_id, cancelled_at__isnull=True).update(cancelled_at=now, revision=F("revision") + 1, updated_at=now)
        )
    open_jobs = list(Event.objects.filter(task_id=task_id, is_final=False).order_by("id").values_list("job_id", flat=True))
    failure: RedisUnavailable | None = None
    # One transaction around the Redis side: what the door tells tracking for each removed job
    # is recorded inline in it (no wait on the recording thread per job), and committed even if
    # Redis goes away midway (a later call cancels the rest).
    with transaction.atomic():
        try:
            answers = api.cancel_many(open_jobs) if open_jobs else []
        except RedisUnavailable as exc:
            answers, failure = [], exc
        removed = [answer.jid for answer in answers if answer.outcome == api.CancelOutcome.CANCELLED]
        cancelling = sum(1 for answer in answers if answer.outcome == api.CancelOutcome.CANCELLING)
        nowhere = [answer.jid for answer in answers if answer.outcome == api.CancelOutcome.NOT_FOUND]
        # removed ones were heard through the door already (then these are no-ops); a job's own
        # end that came first keeps its event final, and these change nothing for it
        changed = apply([Change(job_id, CANCEL, now, message=f"cancelled by {by}") for job_id in [*removed, *nowhere]])
    settled_here = sum(changed[len(removed) :])
    settle_check([task_id], now=now)
    if failure is not None:
        raise failure
    if first:
        logger.info("task %s cancelled by %s: %d removed, %d being stopped", task_id, by, len(removed), cancelling)
    return TaskCancellation(task_id=task_id, first=first, removed=len(removed), cancelling=cancelling, settled_here=settled_here)
