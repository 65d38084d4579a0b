"""Failure handling: what becomes of a job whose perform raised. Runs in the processor thread.

Sidekiq's rules and fields (shared/DESIGN.md §2-3), decided here and written in one atomic step
(``retry.lua``: file in ``retry`` or ``dead`` and remove from the in-flight list together):

- ``retry: false``: no retry and no dead set (the job is just acknowledged and counted failed);
- otherwise the payload gets ``error_message``, ``error_class``, ``failed_at`` (first failure) or
  ``retried_at`` and ``retry_count`` (0 after the first failure), ``error_backtrace`` when the
  ``backtrace`` option asks (zlib-deflated JSON array, base64 as Ruby's ``encode64``), and moves
  to ``retry_queue`` if one is set;
- while ``retry_count`` < the limit (``retry: true`` -> 25, or the number given) it goes to the
  retry set at now + delay: the job's ``sidekiq_retry_in`` if it returns a number, else Sidekiq's
  ``count**4 + 15 + rand(10) * (count + 1)`` seconds; ``sidekiq_retry_in`` may also say
  ``"kill"`` (dead now) or ``"discard"`` (dropped);
- past the limit: ``sidekiq_retries_exhausted``, then the dead set (trimmed to 180 days and
  10,000 entries in the same script) unless ``dead: false``, then the death handlers.

Error handlers see every failure; middleware hooks (``on_retry`` / ``on_dead``) are told the
outcome. A hook or handler that raises is logged and never changes where the job went.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import threading
import traceback
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from . import faults, keys
from .backoff import call_with_retry
from .conf import jobs_settings
from .middleware import notify
from .payload import RECOVERED_KEY, now
from .scripts import script

if TYPE_CHECKING:
    import redis

    from .fetch import UnitOfWork
    from .job import Job

logger = logging.getLogger("jobsapp.retry")

Item = dict[str, Any]

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def safe_message(exception: BaseException) -> str:
    """The exception's message, its class name when empty (Ruby's habit), or a placeholder when
    its ``__str__`` itself fails: a broken exception must not break failure handling."""
    try:
        text = str(exception)
    except Exception:  # noqa: BLE001  # a user-defined __str__ that raises: the job still gets filed
        return f"{type(exception).__name__} (its message could not be rendered)"
    return text or type(exception).__name__


def exception_class_name(exception: BaseException) -> str:
    kind = type(exception)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def backtrace_lines(exception: BaseException) -> list[str]:
    """Ruby-style lines (``path:line:in `name'``) so Sidekiq's Web UI shows them as it would its own."""
    frames = traceback.extract_tb(exception.__traceback__)
    return [f"{frame.filename}:{frame.lineno}:in `{frame.name}'" for frame in reversed(frames)]


def compress_backtrace(lines: list[str]) -> str:
    """Base64 (with Ruby's 60-column newlines) of zlib-deflated JSON, as Sidekiq 6.4 writes it."""
    return base64.encodebytes(zlib.compress(_encoder.encode(lines).encode("utf-8"))).decode("ascii")


#: The most a stored backtrace may inflate to when read: a hostile entry of a megabyte could
#: otherwise inflate to a gigabyte in every page that lists it.
BACKTRACE_MAX_INFLATED_BYTES = 1_000_000


def inflate_backtrace(value: str) -> Any:
    """Decode base64 + zlib + JSON, refusing (ValueError) past BACKTRACE_MAX_INFLATED_BYTES."""
    inflater = zlib.decompressobj()
    data = inflater.decompress(base64.b64decode(value), BACKTRACE_MAX_INFLATED_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError(f"the backtrace inflates past {BACKTRACE_MAX_INFLATED_BYTES} bytes")
    return json.loads(data)


def decompress_backtrace(value: Any) -> list[str]:
    """The lines of an ``error_backtrace`` field (compressed, or a plain list from old Sidekiqs)."""
    if isinstance(value, list):
        return [str(line) for line in value]
    if not isinstance(value, str) or not value:
        return []
    try:
        lines = inflate_backtrace(value)
    except (ValueError, zlib.error):  # unreadable or oversized backtrace: none rather than a failed page
        return []
    return [str(line) for line in lines] if isinstance(lines, list) else []


def default_delay_seconds(count: int, rng: random.Random) -> float:
    return float(count**4 + 15 + rng.randrange(10) * (count + 1))


def retry_limit(item: Item) -> int:
    retry = item.get("retry", True)
    if retry is True:
        return int(jobs_settings.MAX_RETRIES)
    if retry is False:
        return 0
    return int(retry)


def with_error_fields(item: Item, exception: BaseException, timestamp: float) -> Item:
    """A copy of ``item`` carrying Sidekiq's error fields for this failure."""
    failed = dict(item)
    failed.pop(RECOVERED_KEY, None)  # filed by its own failure: no longer a crash suspect
    limit = int(jobs_settings.ERROR_MESSAGE_MAX_CHARS)
    # Ruby's Exception#message is the class name when there is no message (MemoryError())
    failed["error_message"] = safe_message(exception)[:limit]
    failed["error_class"] = exception_class_name(exception)
    if isinstance(failed.get("retry_count"), int) and not isinstance(failed.get("retry_count"), bool):
        failed["retried_at"] = timestamp
        failed["retry_count"] += 1
    else:
        failed["failed_at"] = timestamp
        failed["retry_count"] = 0
    backtrace = failed.get("backtrace")
    if backtrace:
        lines = backtrace_lines(exception)
        if backtrace is not True and isinstance(backtrace, int):
            lines = lines[:backtrace]
        failed["error_backtrace"] = compress_backtrace(lines)
    if failed.get("retry_queue"):
        failed["queue"] = failed["retry_queue"]
    return failed


def dead_trim_args(timestamp: float) -> tuple[str, int]:
    return (repr(timestamp - float(jobs_settings.DEAD_TIMEOUT_SECONDS)), int(jobs_settings.DEAD_MAX_JOBS))


@dataclass(frozen=True)
class Outcome:
    """Where a failed job went: "retry", "dead", "discarded" (and "lost" when no longer ours)."""

    kind: str
    reason: str = ""
    run_at: float | None = None


def call_error_handlers(exception: BaseException, context: dict[str, Any]) -> None:
    for path in jobs_settings.ERROR_HANDLERS:
        try:
            import_string(path)(exception, context)
        except Exception:  # a broken handler must not change the job's fate
            logger.exception("error handler %s failed", path)


def call_death_handlers(item: Item, exception: BaseException | None) -> None:
    for path in jobs_settings.DEATH_HANDLERS:
        try:
            import_string(path)(item, exception)
        except Exception:  # a broken handler must not change the job's fate
            logger.exception("death handler %s failed", path)


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
        member = _encoder.encode(item)
        return call_with_retry(
            lambda: bool(
                script("retry")(
                    self.client,
                    [self.inflight_key, target, keys.RECOVERIES],
                    [unit.raw, repr(score), member, str(item.get("jid", "")), cutoff, maximum],
                )
            ),
            what=f"filing a job in the {target} set",
            logger=logger,
            stop=self.stop,
        )

    def handle(self, unit: UnitOfWork, item: Item, job_class: type[Job] | None, exception: BaseException) -> Outcome:
        """File the failed job; returns where it went. The caller acknowledges "discarded" jobs."""
        timestamp = now()
        call_error_handlers(exception, {"job": item, "queue": unit.queue})
        if item.get("retry", True) is False:
            call_death_handlers(item, exception)  # as Sidekiq 6.4 does for retry: false
            notify("on_dead", job_class, item, exception, reason="retry_disabled")
            return Outcome("discarded", "retry_disabled")
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
                notify("on_dead", job_class, item, exception, reason="discarded")
                return Outcome("discarded", "discarded")
            if delay != "kill":
                seconds = (
                    float(delay)
                    if isinstance(delay, (int, float)) and not isinstance(delay, bool)
                    else default_delay_seconds(count, self.rng)
                )
                run_at = timestamp + seconds
                if faults.POINT:
                    faults.reach("during_retry_write")
                if not self._file(unit, keys.RETRY, run_at, failed, timestamp):
                    return Outcome("lost", "no longer in flight")
                if faults.POINT:
                    faults.reach("after_retry_write")
                notify("on_retry", job_class, failed, exception, retry_count=count, retry_limit=limit, run_at=run_at)
                return Outcome("retry", run_at=run_at)
            reason = "killed"
        else:
            reason = "retries_exhausted"
        if job_class is not None:
            try:
                job_class.sidekiq_retries_exhausted(failed, exception)
            except Exception:  # the hook's failure must not keep the job out of the dead set
                logger.exception("%s.sidekiq_retries_exhausted failed", job_class.__qualname__)
        if failed.get("dead", True) is False:
            call_death_handlers(failed, exception)  # as Sidekiq 6.4 does for dead: false
            notify("on_dead", job_class, failed, exception, reason=reason)
            return Outcome("discarded", reason)
        if not self._file(unit, keys.DEAD, timestamp, failed, timestamp):
            return Outcome("lost", "no longer in flight")
        call_death_handlers(failed, exception)
        notify("on_dead", job_class, failed, exception, reason=reason)
        return Outcome("dead", reason)

    def bury(self, unit: UnitOfWork, item: Item, exception: BaseException, *, reason: str) -> Outcome:
        """Straight to the dead set without retries: unknown classes, malformed or poison jobs."""
        timestamp = now()
        failed = with_error_fields(item, exception, timestamp)
        if not self._file(unit, keys.DEAD, timestamp, failed, timestamp):
            return Outcome("lost", "no longer in flight")
        call_death_handlers(failed, exception)
        notify("on_dead", None, failed, exception, reason=reason)
        return Outcome("dead", reason)
