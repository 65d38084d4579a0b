"""Writing job results: the ``Recorder`` hooked around a retained job, and its writer thread.

What is written, and when, is results.py's header (which also owns the record's fields and the
reading side). This module is the worker side: ``Recorder`` turns the processor thread's
notifications into record changes, ``Writer`` (thread ``jobsapp.results-writer``, one per
process, a component with the lifecycle of component.py) writes them in batches. Kept apart
from results.py so the operators' API, which reads records, imports no worker thread.

A change Redis refuses is dropped (the job goes on as without results), logged once per outage
(backoff.py) with the count of dropped changes when Redis is back.

The worker reaches the ``Recorder`` through the door's table (``jobsapp.ending``'s ``results``
row): ``run`` around the run, ``on_retry`` / ``on_dead`` at its end, ``on_requeue`` when it is put
back; ``run_recorded`` is the same wrapper for the test modes (``jobsapp.testing``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import scripts, shards
from .backoff import Backoff
from .clock import SYSTEM_CLOCK, Clock
from .component import Component
from .conf import jobs_settings
from .connection import REDIS_ERRORS, get_redis
from .payload import Item, now
from .results import (
    FAILED,
    QUEUED,
    RECORD_TTL_MAX_SECONDS,
    RETAIN_OPTION,
    RETRYING,
    RUNNING,
    SUCCEEDED,
    Fields,
    attempt_number,
    error_record_fields,
    identity_record_fields,
    safe_retain_seconds,
    value_record_fields,
    worker_name,
)

if TYPE_CHECKING:
    import redis

    from .job import Job

logger = logging.getLogger("jobsapp.results")


@dataclass(slots=True)
class _Write:
    """One record change: the commands ``_add`` queues on a pipeline."""

    jid: str
    fields: Fields
    ttl_seconds: float
    attempt: bool
    finished: bool
    shard: str
    done: threading.Event | None = None


def _changes(writes: list[_Write]) -> list[tuple[str, float, str, dict[str, str]]]:
    """The ``scripts.result_write`` changes of ``writes``, in order."""
    return [
        (write.jid, float(write.ttl_seconds), "start" if write.attempt else "finish" if write.finished else "update", write.fields)
        for write in writes
    ]


class Writer(Component):
    """Thread ``jobsapp.results-writer``, one per process (started on first use, again after a
    fork): it writes the processor threads' record changes in batches, one ``result_write.lua``
    call per shard and batch, in the order they were submitted (group commit: the busier the process, the bigger
    the batches, so a retained job costs a fraction of a round trip).

    A start (``running``) does not wait. A final change (succeeded, retrying, failed) waits until
    its batch is written, at most ``WAIT_SECONDS``, before the processor thread goes on: the engine
    acknowledges a job after its thread returns, so an acknowledged job has its final record. A
    batch Redis refuses is dropped (the jobs go on as without results): logged once per outage
    (backoff.py), with the number of changes dropped when Redis is back. ``stop(deadline)``
    writes what is queued, then ends the thread."""

    thread_name = "results-writer"
    WAIT_SECONDS = 30.0

    def __init__(self, connection: Callable[[str], redis.Redis], *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(clock=clock)
        self.connection = connection
        self.backoff = Backoff("results-writer", logger=logger, clock=clock)
        self.dropped = 0  # changes not written during the current outage
        self._condition = threading.Condition()
        self._pending: list[_Write] = []
        self._pid: int | None = None

    def submit(self, write: _Write, *, wait: bool) -> None:
        if wait:
            write.done = threading.Event()
        with self._condition:
            if self._pid != os.getpid():  # first use in this process (or a forked child): own thread
                self._pid = os.getpid()
                self._pending = []
                self._stop = threading.Event()
                self.start()
            self._pending.append(write)
            self._condition.notify()
        if write.done is not None and not write.done.wait(self.WAIT_SECONDS):
            logger.warning("jid=%s result record not confirmed within %g s; the job goes on", write.jid, self.WAIT_SECONDS)

    def _wake(self) -> None:
        with self._condition:
            self._condition.notify_all()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._pending and not self._stop.is_set():
                    self._condition.wait()
                if not self._pending:
                    return  # stopped, and everything queued is written
                batch, self._pending = self._pending, []
            self.apply(batch)

    def apply(self, batch: list[_Write]) -> None:
        """Write ``batch`` (one MULTI/EXEC per shard) and release its waiters, whatever happens."""
        try:
            by_shard: dict[str, list[_Write]] = {}
            for write in batch:
                by_shard.setdefault(write.shard, []).append(write)
            for shard, writes in by_shard.items():
                try:
                    scripts.result_write(
                        self.connection(shard),
                        now=now(),
                        changes=_changes(writes),
                        ttl_max_seconds=RECORD_TTL_MAX_SECONDS,
                        max_records=int(jobs_settings.RESULTS_MAX_RECORDS or 0),
                    )
                except REDIS_ERRORS as exc:  # the jobs go on (or are filed) as without results; only their records are missing
                    self.backoff.failed(exc)
                    self.dropped += len(writes)
                    continue
                if self.backoff.in_outage:
                    logger.warning("%d result record change(s) were not written during the outage", self.dropped)
                    self.dropped = 0
                self.backoff.succeeded()
        finally:
            for write in batch:
                if write.done is not None:
                    write.done.set()


class Recorder:
    """Writes a retained job's record around each attempt. One shared instance, no per-job state."""

    def __init__(self, connection: Callable[[str], redis.Redis] = get_redis, clock: Callable[[], float] = now) -> None:
        self.connection = connection
        self.clock = clock
        self.writer = Writer(connection)

    def _write(
        self, jid: str, fields: Fields, *, ttl_seconds: float, attempt: bool = False, finished: bool = False, wait: bool | None = None
    ) -> None:
        """Hand a change to the writer thread; wait until it is written (``wait``, by default for
        anything but a start)."""
        write = _Write(jid, fields, ttl_seconds, attempt, finished, shards.current())
        self.writer.submit(write, wait=not attempt if wait is None else wait)

    def run(self, job: Job, item: Item, final: Callable[[], Any]) -> Any:
        """Record the start of an attempt, run it, record its value when it returns."""
        retain = safe_retain_seconds(item)
        if retain is None:
            return final()
        jid = str(item.get("jid", ""))
        started = self.clock()
        worker = worker_name()
        fields = {**identity_record_fields(item), "status": RUNNING, "last_attempted_at": repr(started), "worker": worker}
        fields[f"worker.{attempt_number(item)}"] = worker
        self._write(jid, fields, ttl_seconds=retain, attempt=True)
        try:
            value = final()
        except BaseException:
            _after_success.pop(jid, None)
            raise
        finished = {"status": SUCCEEDED, "finished_at": repr(self.clock()), **value_record_fields(value)}
        self._write(jid, finished, ttl_seconds=retain, finished=True)
        if _after_success:
            for callback in _after_success.pop(jid, ()):
                callback()
        return value

    def on_retry(self, item: Item, exception: BaseException, *, retry_count: int, run_at: float) -> None:
        retain = safe_retain_seconds(item)
        if retain is None:
            return
        fields = {"status": RETRYING, "next_attempt_at": repr(run_at), "retry_count": str(retry_count), **error_record_fields(exception)}
        waiting_seconds = max(0.0, run_at - self.clock())
        self._write(str(item.get("jid", "")), fields, ttl_seconds=waiting_seconds + retain)

    def on_requeue(self, item: Item) -> None:
        """The job went back to its queue unfinished (shutdown, a dead process's recovery): queued again."""
        retain = safe_retain_seconds(item)
        if retain is None or "jid" not in item:
            return
        self._write(str(item["jid"]), {"status": QUEUED}, ttl_seconds=retain, wait=True)

    def on_dead(self, item: Item, exception: BaseException | None, *, reason: str) -> None:
        retain = safe_retain_seconds(item)
        if retain is None:
            return
        fields = {"status": FAILED, "finished_at": repr(self.clock()), "reason": reason, **error_record_fields(exception)}
        if "class" not in item or "jid" not in item:
            return
        self._write(str(item["jid"]), {**identity_record_fields(item), **fields}, ttl_seconds=retain, finished=True)


recorder = Recorder()


#: jid -> what to call once a retained job's success is written (``after_success_recorded``).
_after_success: dict[str, list[Callable[[], None]]] = {}


def after_success_recorded(jid: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` once the running retained job ``jid`` has its success written to its
    record (from inside its run: a reader told it succeeded then finds the value); dropped if the
    run raises. Only for a job with ``retain`` that is running now."""
    _after_success.setdefault(jid, []).append(callback)


def run_recorded(job: Job, item: Item, run: Callable[[], Any]) -> Any:
    """``run()`` (the server chain around ``perform``), with a retained job's record written
    around it: ``running`` before, ``succeeded`` and the value after. A job without ``retain``
    pays one dict lookup."""
    if RETAIN_OPTION in item:
        return recorder.run(job, item, run)
    return run()


def write_outcome(jid: str, fields: Fields, *, retain_seconds: float) -> None:
    """Record a final outcome decided outside a run (a revoked task, a chain step that will never
    run): ``status`` and error fields, indexed with the finished jobs. Logged, never raised, on a
    Redis error."""
    recorder._write(jid, {"jid": jid, "finished_at": repr(now()), **fields}, ttl_seconds=retain_seconds, finished=True, wait=True)


def write_fields(jid: str, fields: Fields, *, retain_seconds: float, wait: bool = False) -> None:
    """Add fields to a record while its job runs (a state the job reports itself), in order with
    the writer's other changes to it. Not waited for unless ``wait`` (a running job may report
    often, and its final change comes after it in the same queue and is waited for). Logged,
    never raised, on a Redis error."""
    recorder._write(jid, {"jid": jid, **fields}, ttl_seconds=retain_seconds, wait=wait)
