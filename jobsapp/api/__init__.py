"""jobsapp.api: inspection and operations on everything in Redis, as Sidekiq's ``Sidekiq::API``.

The one door the dashboard, the metrics endpoint and the ``jobs`` command use; also for users'
scripts. It reads and writes Sidekiq 6.4's layout (docs/redis-layout.md), so it sees and acts on
Ruby Sidekiq's processes and jobs as well as ours. Every call reads Redis afresh (nothing is
cached), moves are atomic Lua scripts keyed on the raw stored bytes, and a lost connection
raises ``jobsapp.RedisUnavailable``.

    from jobsapp import api
    api.Stats.fetch().enqueued
    api.Queue("default").page(1).entries
    api.RetrySet().retry_all()
    api.ProcessSet.quiet(identity)
    api.find_job(jid)
    api.CompletedSet().page(1)   # finished jobs pushed with retain
    api.BatchSet.get(bid)        # a Redis-only batch: counts, callbacks, failed and pending jobs
    api.cancel(jid)              # stop a running job (within a second), or remove a waiting one
    api.Outbox.state()           # the transactional outbox: entries waiting, the oldest, parked
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..redaction import REDACTED, redact

if TYPE_CHECKING:
    from .batches import BatchDetail, BatchSet, BatchSummary
    from .cancelling import Cancellation, CancelOutcome, cancel, cancel_many
    from .completed import CompletedSet
    from .limits import LimiterSet, LimiterState, UniqueLock, UniqueLocks
    from .lookup import Location, find_job
    from .outbox import Outbox, OutboxState, ParkedEntry
    from .periodic import PeriodicJob, PeriodicSet
    from .processes import DurationHistogram, Process, ProcessSet, Reserved, ReservedSet, Work, WorkSet, job_durations
    from .queues import Queue, QueueSummary
    from .records import JobRecord, Page, SortedEntry, decode_backtrace, encode_backtrace
    from .sorted_sets import DeadSet, JobSet, RetrySet, ScheduledSet, SearchPage
    from .stats import History, Partition, Stats, partitions, redis_info

    Workers = WorkSet

#: Where each name lives, imported on first use (PEP 562): a process that only redacts (the admin
#: of an app built on the engine, loaded by ``django.setup()`` in every worker too) does not import
#: the whole API.
_LOCATIONS = {
    **dict.fromkeys(["BatchDetail", "BatchSet", "BatchSummary"], "batches"),
    **dict.fromkeys(["CancelOutcome", "Cancellation", "cancel", "cancel_many"], "cancelling"),
    "CompletedSet": "completed",
    **dict.fromkeys(["LimiterSet", "LimiterState", "UniqueLock", "UniqueLocks"], "limits"),
    **dict.fromkeys(["Location", "find_job"], "lookup"),
    **dict.fromkeys(["Outbox", "OutboxState", "ParkedEntry"], "outbox"),
    **dict.fromkeys(["PeriodicJob", "PeriodicSet"], "periodic"),
    **dict.fromkeys(
        ["DurationHistogram", "Process", "ProcessSet", "Reserved", "ReservedSet", "Work", "WorkSet", "job_durations"], "processes"
    ),
    **dict.fromkeys(["Queue", "QueueSummary"], "queues"),
    **dict.fromkeys(["JobRecord", "Page", "SortedEntry", "decode_backtrace", "encode_backtrace"], "records"),
    **dict.fromkeys(["DeadSet", "JobSet", "RetrySet", "ScheduledSet", "SearchPage"], "sorted_sets"),
    **dict.fromkeys(["History", "Partition", "Stats", "partitions", "redis_info"], "stats"),
}
#: Other names for the same thing, as Sidekiq's ``Sidekiq::Workers``.
_ALIASES = {"Workers": "WorkSet"}


def __getattr__(name: str) -> Any:
    target = _ALIASES.get(name, name)
    if target not in _LOCATIONS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # The first name used imports the whole API, each module by a statement of its own (no string
    # becomes an import); each name then becomes a plain attribute as it is used.
    from . import batches, cancelling, completed, limits, lookup, outbox, periodic, processes, queues, records, sorted_sets, stats  # noqa: F401

    value = getattr(sys.modules[f"{__name__}.{_LOCATIONS[target]}"], target)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "REDACTED",
    "BatchDetail",
    "BatchSet",
    "BatchSummary",
    "CancelOutcome",
    "Cancellation",
    "CompletedSet",
    "DeadSet",
    "DurationHistogram",
    "History",
    "JobRecord",
    "JobSet",
    "LimiterSet",
    "LimiterState",
    "Location",
    "Outbox",
    "OutboxState",
    "Page",
    "ParkedEntry",
    "Partition",
    "PeriodicJob",
    "PeriodicSet",
    "Process",
    "ProcessSet",
    "Queue",
    "QueueSummary",
    "Reserved",
    "ReservedSet",
    "RetrySet",
    "ScheduledSet",
    "SearchPage",
    "SortedEntry",
    "Stats",
    "UniqueLock",
    "UniqueLocks",
    "Work",
    "WorkSet",
    "Workers",
    "cancel",
    "cancel_many",
    "decode_backtrace",
    "encode_backtrace",
    "find_job",
    "job_durations",
    "partitions",
    "redact",
    "redis_info",
]
