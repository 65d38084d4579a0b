"""Running one job: decode -> look up the registered class -> server middleware -> perform.

Called in a processor thread (``jobsapp.processor-<n>``) owned by the manager. What becomes of
the job is returned to the manager, which acknowledges it in the next batch:

- success: acknowledged, counted processed;
- malformed JSON, an unknown or hostile class name: straight to the dead set with the reason
  (wrapped so the raw text is kept), never imported or evaluated; counted failed;
- ``NoRetryError``: acknowledged, counted failed, not retried (middleware records why);
- any other exception: ``RetryPolicy`` files it in retry or dead atomically with its ack.

Django database connections are per thread: stale ones are closed before and after each job,
as Django does around a request. One log line at start and one at the end of each job.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections

from . import faults, registry
from .errors import MalformedPayload, NoRetryError, UnknownJobClass
from .middleware import notify, run_server_chain
from .payload import RECOVERED_KEY, decode, new_jid, now
from .retry import safe_message

if TYPE_CHECKING:
    from .fetch import UnitOfWork
    from .recovery import Quarantine
    from .retry import RetryPolicy

logger = logging.getLogger("jobsapp.processor")

Item = dict[str, Any]

#: Seconds-bounds of the per-class duration histogram (Prometheus-style, cumulative).
DURATION_BUCKETS_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(slots=True)
class Result:
    """What the manager must do with a finished unit of work."""

    jid: str
    acknowledge: bool  # still in flight: remove it in the next ack batch
    failed: bool
    job_class: str
    elapsed_seconds: float


def malformed_item(unit: UnitOfWork, reason: str) -> Item:
    """A dead-set entry for something that is not a job: valid JSON that keeps the raw text."""
    text = unit.raw.decode("utf-8", errors="replace")
    return {
        "class": "jobsapp.MalformedPayload",
        "args": [text],
        "queue": unit.queue,
        "jid": new_jid(),
        "retry": False,
        "created_at": now(),
        "enqueued_at": now(),
        "malformed_reason": reason,
    }


class Processor:
    """Executes units of work; shared by all processor threads of a process (no per-job state)."""

    def __init__(self, policy: RetryPolicy, *, quarantine: Quarantine | None = None) -> None:
        self.policy = policy
        self.quarantine = quarantine  # runs jobs recovered from dead processes one at a time

    def process(self, unit: UnitOfWork) -> Result:
        started = time.monotonic()
        try:
            item = decode(unit.raw)
        except MalformedPayload as exc:
            # dead: wrapped so the raw text survives and Sidekiq's Web UI can still list it
            wrapped = malformed_item(unit, str(exc))
            logger.error("queue=%s malformed job sent to the dead set: %s", unit.queue, exc)
            self.policy.bury(unit, wrapped, exc, reason="malformed")
            return Result(wrapped["jid"], False, True, "jobsapp.MalformedPayload", time.monotonic() - started)
        jid = str(item.get("jid", ""))
        class_name = item["class"]
        try:
            job_class = registry.lookup(class_name)
        except UnknownJobClass as exc:
            # dead: only registered classes ever run; nothing is imported because a payload named it
            logger.error("class=%r jid=%s queue=%s unknown job class sent to the dead set", class_name[:200], jid, unit.queue)
            self.policy.bury(unit, item, exc, reason="unknown_class")
            return Result(jid, False, True, class_name, time.monotonic() - started)

        args = item.get("args", [])
        kwargs = item.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            kwargs = {}
        logger.info("class=%s jid=%s queue=%s start", class_name, jid, unit.queue)
        close_old_connections()
        try:
            job = job_class()  # user code too (a job's __init__): its failure is the job's failure
            job.jid = jid
            job.item = item
            job.queue = unit.queue
            call_perform = lambda: job.perform(*args, **kwargs)  # noqa: E731
            if faults.POINT:
                call_perform = faults.wrap("in_perform", call_perform)
            if RECOVERED_KEY in item and self.quarantine is not None:
                call_perform = self.quarantine.wrap(jid, call_perform)
            run_server_chain(job, item, unit.queue, call_perform)
        except NoRetryError as exc:
            # acked and counted failed; no retry, no dead set (the job said so)
            elapsed = time.monotonic() - started
            logger.warning("class=%s jid=%s queue=%s elapsed_ms=%.1f fail (no retry): %s", class_name, jid, unit.queue, elapsed * 1000, exc)
            notify("on_dead", job_class, item, exc, reason="no_retry")
            return Result(jid, True, True, class_name, elapsed)
        except BaseException as exc:  # noqa: BLE001  # any failure of user code (even SystemExit): retried, dead or discarded
            elapsed = time.monotonic() - started
            outcome = self.policy.handle(unit, item, job_class, exc)
            logger.warning(
                "class=%s jid=%s queue=%s elapsed_ms=%.1f fail (%s): %s: %s",
                class_name,
                jid,
                unit.queue,
                elapsed * 1000,
                outcome.kind,
                type(exc).__name__,
                safe_message(exc)[:500],
            )
            return Result(jid, outcome.kind == "discarded", True, class_name, elapsed)
        finally:
            close_old_connections()
        if faults.POINT:
            faults.reach("after_perform_before_ack")
        elapsed = time.monotonic() - started
        logger.info("class=%s jid=%s queue=%s elapsed_ms=%.1f done", class_name, jid, unit.queue, elapsed * 1000)
        return Result(jid, True, False, class_name, elapsed)
