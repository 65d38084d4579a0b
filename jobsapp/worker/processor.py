"""Running one job: decode -> look up the registered class -> server middleware -> perform.

Called in a processor thread (``jobsapp.processor-<n>``) owned by the manager. An async job
(``async def perform``) is not run there: ``process`` returns None right after the lookup, and the
manager hands the unit to the async lane, whose thread calls ``process`` again; the chain is the
same, its innermost step awaits the coroutine on the process's event loop (``aio``).
What becomes of the job is returned to the manager, which acknowledges it in the next batch:

- success: acknowledged, counted processed;
- ended unrun by a feature (``ending.TABLE.admit``: fetched past its ``expires_at``, ``jobsapp.expiry``):
  acknowledged, counted processed and expired, never looked up or run;
- malformed JSON (including JSON nested past ``payload.MAX_STORED_NESTING``), a hostile class
  name (``__import__('os')...``, a path): straight to the dead set with the reason (wrapped so
  the raw text is kept), never imported or evaluated; counted failed;
- an unknown class (a ``tasks.py`` class never registered, a job enqueued by web servers deployed
  before the workers): retried like any failure, as Sidekiq retries its NameError, with an
  ``error_message`` naming the class and where classes are discovered;
- anything raised while handling the job that the rules above do not cover (the retry policy
  failing on a hostile field, an engine bug): parked in the dead set as malformed, once
  (``park``); never requeued, so a payload cannot make a worker loop hot;
- ``NoRetryError``: acknowledged, counted failed, not retried (middleware records why);
- past ``sidekiq_options(timeout=...)`` (a sync job; ``timeouts``): ``JobTimeout`` raised
  in its thread, filed as any exception below (an async job's coroutine is cancelled instead and
  ``JobTimeout`` raised in its place, ``aio``);
- cancelled (``jobsapp.api.cancel``; ``cancel`` here, called by the process's cancel listener):
  ``JobCancelled`` raised in its thread as a timeout's ``JobTimeout`` is (the watchdog finds the
  thread that runs its perform: ``Watchdog.cancellable``), an async job's coroutine cancelled
  (``aio``): acknowledged, counted
  failed, never retried, ending ``CANCELLED`` through the door;
- any other exception: ``RetryPolicy`` files it in retry or dead atomically with its ack.

The processor names no feature: each hears the job through the door's table
(``jobsapp.ending``), at ``admit`` (before the lookup), ``start`` (before the run), ``run``
(around the server chain), ``guard`` (around ``perform``: its timeout, its limits, through
``_Admitted.within_timeout`` / ``within_limits``, the worker's watchdog and limiter holder) and
``finish`` (once its fate is filed: features, then server middleware) or ``put_back``. It walks
``TABLE.admit``, ``TABLE.start`` and ``TABLE.guard`` itself, so a plain job pays a dict lookup per
row and no call there (the door's functions would cost it ~0.4 us).

Django database connections are per thread: stale ones are closed before and after each job,
as Django does around a request, in every thread that has opened one (Django's
``connection_created`` marks it; a thread whose jobs never touch the database has nothing to
close and skips the thread-local lookups of every alias). The check before a job is skipped when
the same thread checked after its previous job less than ``CONNECTIONS_FRESH_SECONDS`` ago
(back-to-back jobs: nothing can have gone stale in between). One log
line at start and one at the end of each job.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections
from django.db.backends.signals import connection_created

from .. import ending, faults, limiter, logs, registry
from ..conf import jobs_settings
from ..connection import REDIS_ERRORS
from ..ending import Fate
from ..error_fields import safe_message
from ..errors import JobCancelled, JobTimeout, MalformedPayload, NoRetryError, UnknownJobClass
from ..middleware import run_server_chain
from ..outcomes import DeadReason, OutcomeKind, RequeueReason
from ..payload import RECOVERED_KEY, Item, decode, malformed_item
from . import aio, timeouts

if TYPE_CHECKING:
    from ..job import Job
    from .fetch import UnitOfWork
    from .recovery import Quarantine
    from .retry import RetryPolicy
    from .timeouts import Watchdog

logger = logging.getLogger("jobsapp.processor")

#: A thread that closed its stale database connections after a job this recently does not check
#: again before its next job (Django checks before and after each request).
CONNECTIONS_FRESH_SECONDS = 1.0


class _ThreadConnections(threading.local):
    """Per thread: ``database_used``, set once the thread opened a database connection, and
    ``checked_at``, when it last closed its stale database connections (monotonic). The class
    holds the defaults: a thread-local attribute that is missing costs a raised and discarded
    AttributeError on every read (``getattr`` with a default), about 2 us, twice per job."""

    database_used = False
    checked_at: float | None = None


_connections = _ThreadConnections()


def _mark_database_used(sender: object, **kwargs: object) -> None:
    """``connection_created`` runs in the thread that opened the connection: from then on the
    thread's jobs are followed by ``close_old_connections`` (a thread that never opened one has
    nothing it could close)."""
    _connections.database_used = True


connection_created.connect(_mark_database_used, weak=False, dispatch_uid="jobsapp.processor.database_used")


@dataclass(slots=True, kw_only=True)
class Result:
    """What the manager must do with a finished unit of work."""

    jid: str
    acknowledge: bool  # still in flight: remove it in the next ack batch
    failed: bool
    job_class: str
    elapsed_seconds: float


#: What an unregistered job class name must look like to be retried rather than buried: dotted
#: identifiers (Python), Ruby constants (``A::B``), Celery-style task names (``my-app.tasks.add``).
#: Registered names are looked up first, whatever they look like.
CLASS_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?:(?:\.|::)[A-Za-z_][A-Za-z0-9_-]*)*")
#: The longest class name a job can have.
CLASS_NAME_MAX_CHARS = 500


def looks_like_class_name(name: str) -> bool:
    """Whether ``name`` could name a job class (it is still only ever looked up, never imported)."""
    return len(name) <= CLASS_NAME_MAX_CHARS and CLASS_NAME_PATTERN.fullmatch(name) is not None


class Processor:
    """Executes units of work; shared by all processor threads of a process (no per-job state)."""

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        quarantine: Quarantine | None = None,
        watchdog: Watchdog | None = None,
        async_lane: aio.AsyncLane | None = None,
    ) -> None:
        self.policy = policy
        self.async_lane = async_lane  # where async jobs run; None: in the calling thread (aio)
        self.quarantine = quarantine  # runs jobs recovered from dead processes one at a time
        self.watchdog = watchdog or timeouts.default_watchdog()  # sync jobs' sidekiq_options(timeout=...)
        # units the hard limit filed in retry/dead while their thread still runs them: no longer in
        # flight, so the manager must not count them as put back at shutdown (identity: the same object)
        self.filed_stuck: list[UnitOfWork] = []
        # Asked once: runworkers sets the level before it builds the processor (jobsapp.logs).
        self.log_jobs = logger.isEnabledFor(logging.INFO)
        self.job_lines = logs.JobLines(logger)
        # JOBSAPP["QUEUE_LIMITS"]: queue -> jobs of it running at once, across every process
        problem = limiter.queue_limits_problem(jobs_settings.QUEUE_LIMITS)
        if problem:  # the worker does not start: every job of that queue would fail otherwise
            raise ImproperlyConfigured(problem)
        self.queue_limits: dict[str, int] = dict(jobs_settings.QUEUE_LIMITS or {})

    def process(self, unit: UnitOfWork) -> Result | None:
        """Run one unit of work and file its outcome. Never raises for anything a payload, a job,
        a middleware or the retry policy does: what cannot be handled is parked in the dead set
        as malformed, once (a Redis error while filing at a hard stop is the only exception).

        None: an async job, not run here; the manager hands the unit to the async lane, whose
        thread calls ``process`` again (``aio``)."""
        started = time.monotonic()
        try:
            return self._process(unit, started)
        except REDIS_ERRORS:  # filing waits out outages; this is a hard stop: left in flight
            raise
        except Exception as exc:  # noqa: BLE001  # the payload or the failure path itself failed: dead, never requeued
            return self.park(unit, exc, started=started)

    def park(self, unit: UnitOfWork, exception: BaseException, *, started: float | None = None) -> Result:
        """Send a unit that could not be handled to the dead set as malformed, with the reason,
        wrapped so its raw text is kept. Filing removes it from the in-flight list, so it is
        filed once even when its own failure path had filed it already (then nothing is written)."""
        started = time.monotonic() if started is None else started
        reason = f"{type(exception).__name__}: {safe_message(exception)[:500]}"
        logger.error("queue=%s job parked in the dead set as malformed: %s", unit.queue, reason)
        return self._bury_malformed(unit, f"could not be handled: {reason}", exception, started)

    def _bury_malformed(self, unit: UnitOfWork, reason: str, exception: BaseException, started: float) -> Result:
        """File ``unit`` in the dead set wrapped as malformed (its raw text kept, so Sidekiq's Web
        UI can still list it) with ``reason``; never acknowledged: filing removes it from flight.
        When the raw text still decodes (a job its failure path could not handle), its features
        hear that it ended (``jobsapp.ending``)."""
        wrapped = malformed_item(unit.raw, unit.queue, reason)
        outcome = self.policy.bury(unit, wrapped, exception, reason=DeadReason.MALFORMED)
        if outcome.kind == OutcomeKind.DEAD:
            original = _decoded_or_none(unit.raw)  # else middleware hears the wrapped entry as filed
            told = original if original is not None else outcome.item or wrapped
            ending.finish(self.policy.client, told, Fate.DEAD, error=exception, reason=DeadReason.MALFORMED)
        return Result(
            jid=wrapped["jid"],
            acknowledge=False,
            failed=True,
            job_class="jobsapp.MalformedPayload",
            elapsed_seconds=time.monotonic() - started,
        )

    def _file_stuck(self, unit: UnitOfWork, item: Item, job_class: type[Job], timeout: float) -> None:
        """The watchdog's hard limit: the job ignored JobTimeout (a blocking call) and its process
        is about to stop. It goes to the retry set (or dead) like any failure, and its features
        hear it (a retry keeps its unique lock, dead releases it); its own thread, if it ever
        returns, then finds it no longer in flight and files nothing."""
        hard_limit = self.watchdog.hard_limit_seconds or 0.0
        exception = JobTimeout(
            f"the job ran past its timeout of {timeout:g} s and was still running {hard_limit:g} s later "
            "(a blocking call ignored JobTimeout): its worker process was stopped"
        )
        outcome = self.policy.handle(unit, item, job_class, exception)
        self.filed_stuck.append(unit)
        ending.finish_outcome(self.policy.client, item, outcome, error=exception, job_class=job_class)
        jid = item.get("jid")
        logger.error("class=%s jid=%s queue=%s stuck past the hard limit (%s)", item.get("class"), jid, unit.queue, outcome.kind)

    # --- admit -> run -> one handler per outcome (asynq's processor.go) -------------------

    def _process(self, unit: UnitOfWork, started: float) -> Result | None:
        admitted = self._admit(unit, started)
        if not isinstance(admitted, _Admitted):
            return admitted
        return self._run(admitted)

    def _admit(self, unit: UnitOfWork, started: float) -> _Admitted | Result | None:
        """Decode and look the job up; a Result when it ends here (malformed, expired, unknown or
        hostile class), None when it is handed to the async lane."""
        try:
            item = decode(unit.raw)
        except MalformedPayload as exc:
            logger.error("queue=%s malformed job sent to the dead set: %s", unit.queue, exc)
            return self._bury_malformed(unit, str(exc), exc, started)
        jid = item.get("jid")
        job = _Admitted(
            unit=unit, item=item, jid=jid if isinstance(jid, str) else "", class_name=item["class"], started=started, processor=self
        )
        for key, hook in ending.TABLE.admit:  # the door's admit moment: a dict lookup per row, no call
            if key in item:
                fate = hook(self.policy.client, item)
                if fate is not None:  # a feature ends it unrun (expired): acked, counted processed
                    return self._on_ended_unrun(job, fate)
        try:
            job.job_class = registry.lookup(job.class_name)
        except UnknownJobClass:
            if not looks_like_class_name(job.class_name):
                return self._on_hostile_class_name(job)
            return self._on_unknown_class(job)
        if job.job_class.is_async and self.async_lane is not None and aio.current_lane() is not self.async_lane:
            return None  # handed to the async lane; decoded and looked up again there
        return job

    def _run(self, admitted: _Admitted) -> Result:
        """Run an admitted job through the server chain; its outcome goes to one handler."""
        unit, item, jid, class_name = admitted.unit, admitted.item, admitted.jid, admitted.class_name
        if self.log_jobs:
            self.job_lines.started(class_name, jid, unit.queue)
        # its features hear it start; a ValueError (a garbled timeout) parks it in the dead set (process)
        for key, hook in ending.TABLE.start:  # the door's start moment: a dict lookup per row, no call
            if key in item:
                hook(self.policy.client, item)
        database_used = _connections.database_used
        if database_used:
            checked_at = _connections.checked_at
            if checked_at is None or admitted.started - checked_at >= CONNECTIONS_FRESH_SECONDS:
                close_old_connections()
        try:
            job = admitted.job_class()  # user code too (a job's __init__): its failure is the job's failure
            job.jid = jid
            job.item = item
            job.queue = unit.queue
            with logs.job_context(class_name=class_name, jid=jid):  # users' log lines name their job
                call_perform = self._perform_call(admitted, job)
                ending.run(job, item, lambda: run_server_chain(job, item, unit.queue, call_perform))
        except NoRetryError as exc:
            return self._on_no_retry(admitted, exc)
        except BaseException as exc:  # noqa: BLE001  # any failure of user code (even SystemExit): retried, dead or discarded
            if isinstance(exc, JobCancelled):
                return self._on_cancelled(admitted, exc)
            if isinstance(exc, limiter.PutBack):  # put back at the shutdown deadline before it had room: never ran
                return admitted.result(acknowledge=False, failed=False)
            if isinstance(exc, limiter.OverLimit):
                rescheduled = self._on_over_limit(admitted, exc)
                if rescheduled is not None:
                    return rescheduled
            return self._on_failure(admitted, exc)
        finally:
            if database_used or _connections.database_used:
                close_old_connections()
                _connections.checked_at = time.monotonic()
        return self._on_success(admitted)

    def _perform_call(self, admitted: _Admitted, job: Job) -> Callable[[], Any]:
        """The innermost step of the chain: ``perform`` inside its features' guards (its
        timeout, then its queue limit and the holder of the limiter slots it takes:
        ``ending.TABLE.guard``, through ``_Admitted``), a recovered job inside the quarantine."""
        item = admitted.item
        args = item.get("args", [])
        kwargs = item.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            kwargs = {}
        call_perform: Callable[[], Any] = lambda: job.perform(*args, **kwargs)  # noqa: E731
        if admitted.job_class.is_async:  # innermost: the lane thread parks while the loop awaits the coroutine
            perform = call_perform
            call_perform = lambda: aio.perform(perform, timeout_seconds=admitted.async_timeout_seconds, jid=admitted.jid)  # noqa: E731
        if faults.POINT:
            call_perform = faults.wrap("in_perform", call_perform)
        for key, guard in ending.TABLE.guard:  # the door's guard moment: the first row innermost
            if key is None or key in item:
                call_perform = guard(admitted, call_perform)
        if RECOVERED_KEY in item and self.quarantine is not None:
            call_perform = self.quarantine.wrap(admitted.jid, call_perform)
        return call_perform

    def cancel(self, jid: str) -> bool:
        """Cancel the job ``jid`` (the cancel listener's call): interrupted if a thread of this
        process runs it (True), else remembered, so it ends cancelled when it starts here (False)."""
        interrupted = self.watchdog.cancel(jid)
        if self.async_lane is not None:
            interrupted = self.async_lane.cancel(jid) or interrupted
        return interrupted

    # --- one handler per outcome ----------------------------------------------------------

    def _on_cancelled(self, admitted: _Admitted, exc: JobCancelled) -> Result:
        """Someone cancelled it (``jobsapp.api.cancel``): acknowledged and counted failed; no
        retry, no dead set; the door hears ``CANCELLED``."""
        elapsed_ms = (time.monotonic() - admitted.started) * 1000
        logger.warning(
            "class=%s jid=%s queue=%s elapsed_ms=%.1f cancelled",
            admitted.class_name,
            admitted.jid,
            admitted.unit.queue,
            elapsed_ms,
            extra=admitted.log_fields(),
        )
        ending.finish(self.policy.client, admitted.item, Fate.CANCELLED, error=exc, job_class=admitted.job_class)
        return admitted.result(acknowledge=True, failed=True)

    def _on_success(self, admitted: _Admitted) -> Result:
        """Perform returned: acknowledged, counted processed."""
        if faults.POINT:
            faults.reach("after_perform_before_ack")
        ending.finish(self.policy.client, admitted.item, Fate.SUCCEEDED)
        elapsed = time.monotonic() - admitted.started
        if self.log_jobs:
            self.job_lines.finished(admitted.class_name, admitted.jid, admitted.unit.queue, elapsed)
        return admitted.result(acknowledge=True, failed=False)

    def _on_no_retry(self, admitted: _Admitted, exc: NoRetryError) -> Result:
        """The job raised NoRetryError: acked and counted failed; no retry, no dead set."""
        unit, item = admitted.unit, admitted.item
        elapsed_ms = (time.monotonic() - admitted.started) * 1000
        logger.warning(
            "class=%s jid=%s queue=%s elapsed_ms=%.1f fail (no retry): %s",
            admitted.class_name,
            admitted.jid,
            unit.queue,
            elapsed_ms,
            exc,
            exc_info=exc,
            extra=admitted.log_fields(),
        )
        ending.finish(self.policy.client, item, Fate.DISCARDED, error=exc, reason=DeadReason.NO_RETRY, job_class=admitted.job_class)
        return admitted.result(acknowledge=True, failed=True)

    def _on_over_limit(self, admitted: _Admitted, exc: limiter.OverLimit) -> Result | None:
        """No slot in its limiter or queue: back to the schedule set with backoff, acked in the
        same script; not a failure, not a retry, not an ending. None past MAX_RESCHEDULES (then
        it fails like any exception)."""
        unit, item = admitted.unit, admitted.item
        run_at = limiter.reschedule(self.policy, unit, item, exc, rng=self.policy.rng)
        if run_at is None:
            return None
        ending.put_back(item, reason=RequeueReason.OVER_LIMIT)  # logged by reschedule: when it runs again
        return admitted.result(acknowledge=False, failed=False)

    def _on_failure(self, admitted: _Admitted, exc: BaseException) -> Result:
        """Any other exception: the retry policy files it in retry or dead (or discards it)
        atomically with its ack; logged at WARNING with its traceback."""
        unit, item = admitted.unit, admitted.item
        outcome = self.policy.handle(unit, item, admitted.job_class, exc)
        elapsed_ms = (time.monotonic() - admitted.started) * 1000
        logger.warning(
            "class=%s jid=%s queue=%s elapsed_ms=%.1f fail (%s): %s: %s",
            admitted.class_name,
            admitted.jid,
            unit.queue,
            elapsed_ms,
            outcome.kind,
            type(exc).__name__,
            safe_message(exc)[:500],
            exc_info=exc,
            extra=admitted.log_fields(),
        )
        ending.finish_outcome(self.policy.client, item, outcome, error=exc, job_class=admitted.job_class)
        return admitted.result(acknowledge=outcome.kind == OutcomeKind.DISCARDED, failed=True)

    def _on_ended_unrun(self, admitted: _Admitted, fate: Fate) -> Result:
        """A feature ended the job before its class was looked up (``ending.TABLE.admit``: fetched past
        its ``expires_at``, which the expiry row logged and counted): acknowledged and counted
        processed, never looked up or run."""
        ending.finish(self.policy.client, admitted.item, fate)  # the door looks its class up for middleware
        admitted.class_name = str(admitted.class_name)[:200]
        return admitted.result(acknowledge=True, failed=False)

    def _on_hostile_class_name(self, admitted: _Admitted) -> Result:
        """Not a name any job could have (empty, ``__import__('os')...``, a path): dead at once;
        nothing is imported."""
        unit, item, shown = admitted.unit, admitted.item, admitted.class_name[:200]
        not_a_name = UnknownJobClass(f"{shown!r} is not a job class name; nothing was imported or run")
        logger.error("class=%r jid=%s queue=%s hostile job class name sent to the dead set", shown, admitted.jid, unit.queue)
        outcome = self.policy.bury(unit, item, not_a_name, reason=DeadReason.UNKNOWN_CLASS)
        ending.finish_outcome(self.policy.client, item, outcome, error=not_a_name)
        admitted.class_name = shown
        return admitted.result(acknowledge=False, failed=True)

    def _on_unknown_class(self, admitted: _Admitted) -> Result:
        """Retried as any failure (Sidekiq's NameError): a deploy where web servers know a class
        before the workers do heals itself; nothing is imported because a payload named it."""
        unit, item, shown = admitted.unit, admitted.item, admitted.class_name[:200]
        unknown = UnknownJobClass(
            f"{shown!r} is not a registered job class in this worker; job classes are found in the "
            "jobs.py (or tasks.py) module of each installed app (INSTALLED_APPS), so define it there and restart the workers. "
            "Nothing was imported or run"
        )
        outcome = self.policy.handle(unit, item, None, unknown)
        logger.error("class=%r jid=%s queue=%s unknown job class (%s)", shown, admitted.jid, unit.queue, outcome.kind)
        ending.finish_outcome(self.policy.client, item, outcome, error=unknown)
        admitted.class_name = shown
        return admitted.result(acknowledge=outcome.kind == OutcomeKind.DISCARDED, failed=True)


@dataclass(slots=True, kw_only=True)
class _Admitted:
    """A decoded job on its way through ``Processor._process``."""

    unit: UnitOfWork
    item: Item
    jid: str
    class_name: str
    started: float  # monotonic
    processor: Processor
    job_class: type[Job] = None  # type: ignore[assignment]  # set by the lookup, before the run
    async_timeout_seconds: float | None = None  # an async job's timeout: its coroutine is cancelled past it

    # --- the worker's guards, as ``ending.Run``: the timeouts and limits rows call them ----

    def within_timeout(self, seconds: float | None, call: Callable[[], Any]) -> Callable[[], Any]:
        """A sync job: inside the watchdog's guard, where a cancel (``Processor.cancel``) raises
        JobCancelled, and JobTimeout past ``seconds``, the job filed at the hard limit
        (``Processor._file_stuck``); None: ``cancellable``. An async job: its coroutine is
        cancelled past ``seconds`` (``aio.perform`` reads ``async_timeout_seconds``) or by a
        cancel (``AsyncLane.cancel``)."""
        if self.job_class.is_async:
            self.async_timeout_seconds = seconds
            return call
        processor, queue = self.processor, self.unit.queue
        if seconds is None:  # no timeout (a null ``timeout``): only a cancel interrupts it
            return processor.watchdog.cancellable(call, jid=self.jid)
        stuck = partial(processor._file_stuck, self.unit, self.item, self.job_class, seconds)
        return processor.watchdog.within(seconds, call, on_stuck=stuck, class_name=self.class_name, jid=self.jid, queue=queue)

    def cancellable(self, call: Callable[[], Any]) -> Callable[[], Any]:
        """A sync job without a timeout: noted where a cancel (``Processor.cancel``) finds its
        thread and raises JobCancelled, with no guard and no lock (``Watchdog.cancellable``). An
        async job: as it is (the lane cancels its coroutine, ``AsyncLane.cancel``)."""
        if self.job_class.is_async:
            return call
        return self.processor.watchdog.cancellable(call, jid=self.jid)

    def within_limits(self, call: Callable[[], Any]) -> Callable[[], Any]:
        """Inside its queue's limit (``QUEUE_LIMITS``), as the holder of the limiter slots it takes:
        those it still holds when the run ends, however it ends, are released then."""
        processor, queue = self.processor, self.unit.queue
        if processor.queue_limits and queue in processor.queue_limits:
            call = limiter.within(limiter.queue_limiter(queue, processor.queue_limits[queue]), call)
        return limiter.holding(processor.policy.inflight_key, self.jid, call)

    def result(self, *, acknowledge: bool, failed: bool) -> Result:
        return Result(
            jid=self.jid,
            acknowledge=acknowledge,
            failed=failed,
            job_class=self.class_name,
            elapsed_seconds=time.monotonic() - self.started,
        )

    def log_fields(self) -> dict[str, str]:
        return {"job_class": self.class_name, "jid": self.jid, "queue": self.unit.queue}


def _decoded_or_none(raw: bytes) -> Item | None:
    """The job in ``raw`` when it decodes, else None (its features cannot be told)."""
    try:
        return decode(raw)
    except MalformedPayload:  # nothing readable: no feature can be told it ended
        return None
