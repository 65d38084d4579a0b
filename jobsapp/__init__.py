"""jobsapp: Sidekiq-compatible background jobs for Django, on Redis.

The public API. Everything else is an implementation module; see the README.
"""

from .errors import (
    JobsError,
    MalformedPayload,
    NoRetryError,
    PayloadTooLarge,
    RedisUnavailable,
    UnknownJobClass,
)
from .job import Job, Worker, sidekiq_options
from .middleware import ClientMiddleware, ServerMiddleware

__all__ = [
    "ClientMiddleware",
    "Job",
    "JobsError",
    "MalformedPayload",
    "NoRetryError",
    "PayloadTooLarge",
    "RedisUnavailable",
    "ServerMiddleware",
    "UnknownJobClass",
    "Worker",
    "sidekiq_options",
]
