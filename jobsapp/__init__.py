"""jobsapp: Sidekiq-compatible background jobs for Django, on Redis.

The public API. Everything else is an implementation module; see the README.
"""

from .errors import (
    JobsError,
    JobTimeout,
    MalformedPayload,
    NoRetryError,
    PayloadTooLarge,
    RedisUnavailable,
    ReplicationTimeout,
    UnknownJobClass,
    UnknownShard,
)
from .functions import job
from .job import Job, Worker, sidekiq_options
from .middleware import ClientMiddleware, ServerMiddleware
from .periodic import periodic_job

__all__ = [
    "ClientMiddleware",
    "Job",
    "JobTimeout",
    "JobsError",
    "MalformedPayload",
    "NoRetryError",
    "PayloadTooLarge",
    "RedisUnavailable",
    "ReplicationTimeout",
    "ServerMiddleware",
    "UnknownJobClass",
    "UnknownShard",
    "Worker",
    "job",
    "periodic_job",
    "sidekiq_options",
]
