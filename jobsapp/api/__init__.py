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
"""

from ..redaction import REDACTED, redact
from .batches import BatchDetail, BatchSet, BatchSummary
from .completed import CompletedSet
from .limits import LimiterSet, LimiterState, UniqueLock, UniqueLocks
from .lookup import Location, find_job
from .periodic import PeriodicJob, PeriodicSet
from .processes import DurationHistogram, Process, ProcessSet, Work, WorkSet, job_durations
from .queues import Queue, QueueSummary
from .records import JobRecord, Page, SortedEntry, decode_backtrace, encode_backtrace
from .sorted_sets import DeadSet, JobSet, RetrySet, ScheduledSet, SearchPage
from .stats import History, Stats, redis_info

Workers = WorkSet

__all__ = [
    "REDACTED",
    "BatchDetail",
    "BatchSet",
    "BatchSummary",
    "CompletedSet",
    "DeadSet",
    "DurationHistogram",
    "History",
    "JobRecord",
    "JobSet",
    "LimiterSet",
    "LimiterState",
    "Location",
    "Page",
    "PeriodicJob",
    "PeriodicSet",
    "Process",
    "ProcessSet",
    "Queue",
    "QueueSummary",
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
    "decode_backtrace",
    "encode_backtrace",
    "find_job",
    "job_durations",
    "redact",
    "redis_info",
]
