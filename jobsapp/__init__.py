"""jobsapp: Sidekiq-compatible background jobs for Django, on Redis.

The public API: the names in ``__all__`` (jobs, middleware bases and the hook vocabulary their
``on_dead`` / ``on_requeue`` hooks receive, ``hold_ack`` for a middleware whose writes must be
durable before a job's ack, the exceptions, the engine's settings and the
validation an app built on the engine runs on its own settings dict), and these public modules:

- ``jobsapp.client``: the raw client (``push``, ``push_bulk``, ``job_template``, ``new_jid``),
  as Sidekiq's ``Sidekiq::Client``;
- ``jobsapp.api``: the operators' API on Sidekiq's layout, as ``Sidekiq::API``;
- ``jobsapp.login``: the login page a staff page sends an anonymous visitor to;
- ``jobsapp.http``: ``RedisUnavailableMiddleware``;
- ``jobsapp.outbox``: the transactional outbox (``enabled``, ``defer``, ``register`` of an entry
  kind), for an app built on the engine whose pushes must commit with its rows;
- the features' modules: ``jobsapp.results`` (``get``), ``jobsapp.limiter``, ``jobsapp.batch``,
  ``jobsapp.unique``, ``jobsapp.periodic``, ``jobsapp.shards`` (``using``),
  ``jobsapp.transactions``, ``jobsapp.tracing``;
- the edges: ``jobsapp.celery``, ``jobsapp.django_tasks`` (``JobsBackend``), ``jobsapp.testing``
  and ``jobsapp.pytest_plugin``, ``jobsapp.urls``.

Everything else is an implementation module (docs/architecture.md places each one).
"""

# First, before any engine module imports redis-py: without the metrics SDK it loads for nothing.
from . import redis_import  # noqa: F401
from .acks import hold_ack
from .conf import jobs_settings
from .errors import (
    JobCancelled,
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
from .outcomes import DeadReason, OutcomeKind, RequeueReason
from .periodic import periodic_job
from .settings_validation import settings_problems

__all__ = [
    "ClientMiddleware",
    "DeadReason",
    "Job",
    "JobCancelled",
    "JobTimeout",
    "JobsError",
    "MalformedPayload",
    "NoRetryError",
    "OutcomeKind",
    "PayloadTooLarge",
    "RedisUnavailable",
    "ReplicationTimeout",
    "RequeueReason",
    "ServerMiddleware",
    "UnknownJobClass",
    "UnknownShard",
    "Worker",
    "hold_ack",
    "job",
    "jobs_settings",
    "periodic_job",
    "settings_problems",
    "sidekiq_options",
]
