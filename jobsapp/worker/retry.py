"""Failure handling: what becomes of a job whose perform raised. Runs in the processor thread.

Sidekiq's rules and fields (docs/payload.md), decided here and written in one atomic step
(``retry.lua``: file in ``retry`` or ``dead`` and remove from the in-flight list together):

- ``retry: false``: no retry and no dead set (the job is just acknowledged and counted failed);
- otherwise the payload gets ``error_message``, ``error_class``, ``failed_at`` (first failure) or
  ``retried_at`` and ``retry_count`` (0 after the first failure), ``error_backtrace``
  (zlib-deflated JSON array, base64 as Ruby's ``encode64``) as the ``backtrace`` option asks:
  none for ``false``, every frame for ``true``, the innermost N for N, and, when the payload has
  no ``backtrace`` (Sidekiq would store none), a compact default (``error_fields``; none for an
  error that was never raised: an unknown class, a poison job); it moves to
  ``retry_queue`` if one is set;
- while ``retry_count`` < the limit (``retry: true`` -> 25, or the number given) it goes to the
  retry set at now + delay: the job's ``sidekiq_retry_in`` if it returns a number, else Sidekiq's
  ``count**4 + 15 + rand(10) * (count + 1)`` seconds; ``sidekiq_retry_in`` may also say
  ``"kill"`` (dead now) or ``"discard"`` (dropped);
- past the limit: ``sidekiq_retries_exhausted``, then the dead set (trimmed to 180 days and
  10,000 entries in the same script) unless ``dead: false``, then the death handlers.

Error handlers see every failure, death handlers every job that will not run again (as Sidekiq
6.4 calls them); middleware hooks (``on_retry`` / ``on_dead``) hear the outcome through the "job
ended" door (``jobsapp.ending.finish_outcome``), which the caller calls once the outcome is filed.
A hook or handler that raises is logged and never changes where the job went.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from .. import faults, keys, scripts
from ..backoff import call_with_retry
from ..conf import jobs_settings
from ..error_fields import (
    BACKTRACE_LINE_MAX_CHARS,
    DEFAULT_BACKTRACE_FRAMES,
    backtrace_lines,
    compress_backtrace,
    exception_class_name,
    safe_message,
)
from ..middleware import call_death_handlers
from ..outcomes import DeadReason, OutcomeKind
from ..payload import RECOVERED_KEY, Item, compact_json, now

if TYPE_CHECKING:
    import redis

    from ..job import Job
    from .fetch import UnitOfWork

logger = logging.getLogger("jobsapp.retry")


#: The longest retry delay taken from ``sidekiq_retry_in``: about 100 years.
RETRY_DELAY_MAX_SECONDS = 100 * 365 * 24 * 3600.0


def usable_delay_seconds(delay: Any) -> float | None:
    """``sidekiq_retry_in``'s answer as seconds in 0..RETRY_DELAY_MAX_SECONDS, or None (use the
    default backoff) when it is not a finite number: a NaN score would make Redis refuse the
    filing, and a huge integer would overflow a float."""
    if not isinstance(delay, (int, float)) or isinstance(delay, bool):
        return None
    try:
        seconds = float(delay)
    except OverflowError:
        return None
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_DELAY_MAX_SECONDS)


def default_delay_seconds(count: int, rng: random.Random) -> float:
    return float(count**4 + 15 + rng.randrange(10) * (count + 1))


#: The largest retry limit or ``retry_count`` taken from a payload: past it a value is not a
#: count another client meant (``10**200``), and Sidekiq's delay ``count**4`` would overflow.
RETRY_LIMIT_MAX = 10_000


def _is_whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def retry_limit(item: Item) -> int:
    """How many retries the job allows. ``retry`` comes from any client: anything but a boolean
    or a whole number in 0..RETRY_LIMIT_MAX (``"yes"``, null, ``10**200``, -1) means the default,
    as Ruby's Sidekiq reads any other truthy value."""
    retry = item.get("retry", True)
    if retry is False:
        return 0
    if _is_whole_number(retry) and 0 <= retry <= RETRY_LIMIT_MAX:
        return int(retry)
    return int(jobs_settings.MAX_RETRIES)


def previous_retry_count(item: Item) -> int | None:
    """The payload's ``retry_count`` clamped to 0..RETRY_LIMIT_MAX, or None when it has none
    usable (first failure)."""
    count = item.get("retry_count")
    if not isinstance(count, int) or isinstance(count, bool):
        return None
    return min(max(count, 0), RETRY_LIMIT_MAX)


def with_error_fields(item: Item, exception: BaseException, timestamp: float) -> Item:
    """A copy of ``item`` carrying Sidekiq's error fields for this failure."""
    failed = dict(item)
    failed.pop(RECOVERED_KEY, None)  # filed by its own failure: no longer a crash suspect
    limit = int(jobs_settings.ERROR_MESSAGE_MAX_CHARS)
    # Ruby's Exception#message is the class name when there is no message (MemoryError())
    failed["error_message"] = safe_message(exception)[:limit]
    failed["error_class"] = exception_class_name(exception)
    previous = previous_retry_count(failed)
    if previous is not None:
        failed["retried_at"] = timestamp
        failed["retry_count"] = min(previous + 1, RETRY_LIMIT_MAX)
    else:
        failed["failed_at"] = timestamp
        failed["retry_count"] = 0
    if "backtrace" not in failed:  # a Python job's default: compact and bounded
        lines = backtrace_lines(exception, limit=DEFAULT_BACKTRACE_FRAMES, line_max_chars=BACKTRACE_LINE_MAX_CHARS)
        if lines:  # none for an error that was never raised (an unknown class, poison): nothing ran
            failed["error_backtrace"] = compress_backtrace(lines)
    elif backtrace := failed["backtrace"]:  # Sidekiq's option: true for all, N for the innermost N
        frames = max(backtrace, 0) if backtrace is not True and _is_whole_number(backtrace) else None
        failed["error_backtrace"] = compress_backtrace(backtrace_lines(exception, limit=frames))
    if isinstance(failed.get("retry_queue"), str) and failed["retry_queue"]:
        failed["queue"] = failed["retry_queue"]
    return failed


def dead_trim_args(timestamp: float) -> tuple[str, int]:
    return (repr(timestamp - float(jobs_settings.DEAD_TIMEOUT_SECONDS)), int(jobs_settings.DEAD_MAX_JOBS))


@dataclass(frozen=True)
class Outcome:
    """Where a failed job went (``OutcomeKind``), and why (a ``DeadReason`` for dead and discarded;
    None for a retry, and for a job no longer in flight: another process filed it)."""

    kind: OutcomeKind
    reason: DeadReason | None = None
    run_at: float | None = None
    item: Item | None = None  # the job as filed (with its error fields); None when nothing was written
    retry_limit: int = 0  # RETRY: how many retries the job allows (what ``on_retry`` is told)


def call_error_handlers(exception: BaseException, context: dict[str, Any]) -> None:
    for path in jobs_settings.ERROR_HANDLERS:
        try:
            import_string(path)(exception, context)
        except Exception:  # a broken handler must not change the job's fate
            logger.exception("error handler %s failed", path)


class CrossPartitionFiling:
    """Filing a job in flight in a partition above 0 of a partitioned cluster in a set of
    partition 0 (the retry, dead or schedule set all live there): two steps, as no script can
    touch keys of two slots. First the set gets the member (``retry.lua`` with no in-flight
    list: ``ZADD``, the dead set trimmed), then the job leaves its partition's in-flight list
    (``ack.lua``: ``LREM``, its recovery count dropped). A job no longer in flight there (a
    sweeper took it back: it runs again) is taken out of the set again, when the first attempt
    saw it gone; after a failed attempt that may have removed it with its reply lost, the filing
    is kept. A crash between the steps leaves the job filed and in flight, so it may run once
    more: at least once, never lost. One instance per job filed (``call_with_retry`` calls it
    again after a Redis error)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        inflight_key: str,
        index: int,
        target_set: str,
        raw: bytes,
        score: float,
        member: str,
        jid: str,
        dead_cutoff: str = "",
        dead_max_jobs: int = 0,
    ) -> None:
        self.client = client
        self.inflight_key = keys.in_partition(inflight_key, index)
        self.index = index
        self.target_set = target_set
        self.raw = raw
        self.score = score
        self.member = member
        self.jid = jid
        self.dead_cutoff = dead_cutoff
        self.dead_max_jobs = dead_max_jobs
        self._removal_sent = False

    def __call__(self) -> bool:
        scripts.retry(
            self.client,
            inflight_key="",
            target_set=self.target_set,
            raw=self.raw,
            score=self.score,
            member=self.member,
            jid="",
            dead_cutoff=self.dead_cutoff,
            dead_max_jobs=self.dead_max_jobs,
        )
        first = not self._removal_sent
        self._removal_sent = True
        with keys.using_partition(self.index):
            removed = scripts.ack(
                self.client,
                inflight_key=self.inflight_key,
                raws=[self.raw],
                jids=[self.jid],
                processed=0,
                failed=0,
                today=dt.datetime.now(dt.UTC).date(),
                daily_ttl_seconds=0,
            ).removed
        if removed or not first:
            return True
        self.client.zrem(self.target_set, self.member)
        return False


class RetryPolicy:
    """Decides and files the fate of a failed job."""

    def __init__(
        self, client: redis.Redis, inflight_key: str, *, rng: random.Random | None = None, stop: threading.Event | None = None
    ) -> None:
        self.client = client
        self.inflight_key = inflight_key
        self.rng = rng or random.Random()
        self.stop = stop

    def _file(self, unit: UnitOfWork, target: str, score: float, item: Item, timestamp: float) -> bool:
        """Write the outcome (``retry.lua``: file and un-flight atomically, the dead set trimmed in
        the same script), waiting out a Redis outage: the job stays in flight until it is filed."""
        cutoff, maximum = dead_trim_args(timestamp) if target == keys.DEAD else ("", 0)
        member = compact_json(item, allow_nan=True)  # a foreign job with NaN is still filed
        if unit.partition and self.inflight_key:
            filing = CrossPartitionFiling(
                self.client,
                inflight_key=self.inflight_key,
                index=unit.partition,
                target_set=target,
                raw=unit.raw,
                score=score,
                member=member,
                jid=str(item.get("jid", "")),
                dead_cutoff=cutoff,
                dead_max_jobs=maximum,
            )
            return call_with_retry(filing, what=f"filing a job in the {target} set", logger=logger, stop=self.stop)
        return call_with_retry(
            lambda: scripts.retry(
                self.client,
                inflight_key=self.inflight_key,
                target_set=target,
                raw=unit.raw,
                score=score,
                member=member,
                jid=str(item.get("jid", "")),
                dead_cutoff=cutoff,
                dead_max_jobs=maximum,
            ),
            what=f"filing a job in the {target} set",
            logger=logger,
            stop=self.stop,
        )

    def file_scheduled(self, unit: UnitOfWork, item: Item, run_at: float) -> bool:
        """Put a job back in the schedule set for ``run_at`` and acknowledge it, atomically: a job
        over a limit (jobsapp.limiter), which is neither a failure nor a retry."""
        return self._file(unit, keys.SCHEDULE, run_at, item, now())

    def handle(self, unit: UnitOfWork, item: Item, job_class: type[Job] | None, exception: BaseException) -> Outcome:
        """File the failed job; returns where it went. The caller acknowledges "discarded" jobs."""
        timestamp = now()
        call_error_handlers(exception, {"job": item, "queue": unit.queue})
        if item.get("retry", True) is False:
            call_death_handlers(item, exception)  # as Sidekiq 6.4 does for retry: false
            return Outcome(OutcomeKind.DISCARDED, DeadReason.RETRY_DISABLED, item=item)
        failed = with_error_fields(item, exception, timestamp)
        count = int(failed["retry_count"])
        limit = retry_limit(item)
        if count < limit:
            delay: float | str | None = None
            if job_class is not None:
                try:
                    delay = job_class.sidekiq_retry_in(count, exception)
                except Exception:  # a broken custom delay falls back to the default backoff
                    logger.exception("%s.sidekiq_retry_in failed; using the default delay", job_class.__qualname__)
            if delay == "discard":
                return Outcome(OutcomeKind.DISCARDED, DeadReason.DISCARDED, item=item)
            if delay != "kill":
                seconds = usable_delay_seconds(delay)
                if seconds is None:
                    seconds = default_delay_seconds(count, self.rng)
                run_at = timestamp + seconds
                if faults.POINT:
                    faults.reach("during_retry_write")
                if not self._file(unit, keys.RETRY, run_at, failed, timestamp):
                    return Outcome(OutcomeKind.LOST)
                if faults.POINT:
                    faults.reach("after_retry_write")
                return Outcome(OutcomeKind.RETRY, run_at=run_at, item=failed, retry_limit=limit)
            reason = DeadReason.KILLED
        else:
            reason = DeadReason.RETRIES_EXHAUSTED
        if job_class is not None:
            try:
                job_class.sidekiq_retries_exhausted(failed, exception)
            except Exception:  # the hook's failure must not keep the job out of the dead set
                logger.exception("%s.sidekiq_retries_exhausted failed", job_class.__qualname__)
        if failed.get("dead", True) is False:
            call_death_handlers(failed, exception)  # as Sidekiq 6.4 does for dead: false
            return Outcome(OutcomeKind.DISCARDED, reason, item=failed)
        if not self._file(unit, keys.DEAD, timestamp, failed, timestamp):
            return Outcome(OutcomeKind.LOST)
        call_death_handlers(failed, exception)
        return Outcome(OutcomeKind.DEAD, reason, item=failed)

    def bury(self, unit: UnitOfWork, item: Item, exception: BaseException, *, reason: DeadReason) -> Outcome:
        """Straight to the dead set without retries: unknown classes, malformed or poison jobs."""
        timestamp = now()
        failed = with_error_fields(item, exception, timestamp)
        if not self._file(unit, keys.DEAD, timestamp, failed, timestamp):
            return Outcome(OutcomeKind.LOST)
        call_death_handlers(failed, exception)
        return Outcome(OutcomeKind.DEAD, reason, item=failed)
