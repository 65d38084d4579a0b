"""jobsapp.api: inspection and operations on everything in Redis, as Sidekiq's ``Sidekiq::API``.

The one door the dashboard, the metrics endpoint and the ``jobs`` command use; also for users'
scripts. It reads and writes Sidekiq 6.4's layout (shared/DESIGN.md §1), so it sees and acts on
Ruby Sidekiq's processes and jobs as well as ours. Every call reads Redis afresh (nothing is
cached), moves are atomic Lua scripts keyed on the raw stored bytes, and a lost connection
raises ``jobsapp.RedisUnavailable``.

    from jobsapp import api
    api.Stats.fetch().enqueued
    api.Queue("default").page(1).entries
    api.RetrySet().retry_all()
    api.ProcessSet.quiet(identity)
    api.find_job(jid)
"""

from .lookup import Location, find_job
from .processes import DurationHistogram, Process, ProcessSet, Work, WorkSet, job_durations
from .queues import Queue, QueueSummary
from .records import JobRecord, Page, SortedEntry, decode_backtrace, encode_backtrace
from .redaction import REDACTED, redact
from .sorted_sets import DeadSet, JobSet, RetrySet, ScheduledSet
from .stats import History, Stats, redis_info

Workers = WorkSet

__all__ = [
    "REDACTED",
    "DeadSet",
    "DurationHistogram",
    "History",
    "JobRecord",
    "JobSet",
    "Location",
    "Page",
    "Process",
    "ProcessSet",
    "Queue",
    "QueueSummary",
    "RetrySet",
    "ScheduledSet",
    "SortedEntry",
    "Stats",
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
