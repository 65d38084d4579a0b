"""The engine's settings: one dict, ``settings.JOBSAPP``, with documented defaults.

Read lazily on every access (``jobs_settings.CONCURRENCY``), so tests that use
``override_settings(JOBSAPP=...)`` see their values at once, as DRF's settings do.
Units are in the names. Unknown keys are reported by the system check jobsapp.E001.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Where Redis is: a URL, or the alias of a django-redis cache whose pool is shared (TLS,
    # Sentinel and pool size then come from that one CACHES entry). The alias wins when set.
    "REDIS_URL": None,  # None: settings.REDIS_URL, then $REDIS_URL, then redis://127.0.0.1:6379/0
    "REDIS_CACHE_ALIAS": None,
    "REDIS_SOCKET_TIMEOUT_SECONDS": 10.0,
    # Redis Sentinel: the master is found through these Sentinels ([[host, port], ...]) under the
    # name SENTINEL_SERVICE, and followed across failovers. REDIS_URL then only gives the master's
    # database number, username/password and TLS (rediss://); its host and port are not used.
    # SENTINEL_OPTIONS are connection options for the Sentinels themselves (password, username,
    # ssl, ssl_ca_certs, socket_timeout, ...). A django-redis cache alias may use Sentinel too.
    "SENTINELS": None,
    "SENTINEL_SERVICE": None,
    "SENTINEL_OPTIONS": {},
    # A push returns only once this many replicas have its write (Redis WAIT), so an acknowledged
    # push survives a failover; ReplicationTimeout when they do not confirm in time. 0: off.
    # Redis Cluster: REDIS_URL names any node (a managed service's configuration endpoint) and
    # every key carries a hash tag (docs/operations/cluster.md). Ruby Sidekiq cannot share it.
    "REDIS_CLUSTER": False,
    # On a cluster, how many partitions (each under its own hash tag, on its own master when the
    # cluster has this many) each queue's jobs are spread over: the number of masters is best.
    # Every producer and worker of the cluster must use the same number.
    "CLUSTER_PARTITIONS": 1,
    "ENQUEUE_REPLICAS": 0,
    "ENQUEUE_REPLICAS_TIMEOUT_SECONDS": 1.0,
    # More Redis servers: {"name": {"REDIS_URL": ..., "QUEUES": [...], "CLASSES": [...]}}; the
    # settings above are the shard "default". See jobsapp/shards.py.
    "SHARDS": {},
    # Producing side.
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    "CLIENT_MIDDLEWARE": [],  # dotted paths of jobsapp.middleware.ClientMiddleware subclasses
    "DEFAULT_QUEUE": "default",
    # Job.perform_* inside the project's transaction.atomic() push when it commits (nothing on
    # rollback); False pushes at once. Per call: Job.set(on_commit=False). jobsapp/transactions.py.
    "ENQUEUE_ON_COMMIT": True,
    # The transactional outbox (jobsapp/outbox.py): a push inside the project's transaction is
    # also written to the table jobsapp_outbox in it, so a committed job is never lost (Redis down
    # at commit, the process killed after COMMIT); runworkers' relay pushes what is left once it
    # is OUTBOX_GRACE_SECONDS old. Needs `manage.py migrate jobsapp` (check jobsapp.W050).
    "OUTBOX": True,
    "OUTBOX_GRACE_SECONDS": 5.0,
    # How long the relay's lock (one relay at a time across the fleet) outlives a relay that died.
    "OUTBOX_RELAY_LOCK_SECONDS": 30.0,
    # Consuming side (runworkers flags override these).
    "QUEUES": ["default"],
    "CONCURRENCY": 10,
    # Async jobs (async def perform) running at once per process on its event loop, besides the
    # CONCURRENCY threads (runworkers --async-concurrency). See jobsapp/worker/aio.py.
    "ASYNC_CONCURRENCY": 100,
    "PROCESSES": None,  # None: one worker process per CPU (runworkers -P)
    "SHUTDOWN_TIMEOUT_SECONDS": 25.0,
    "TAG": "",
    "LABELS": [],
    "FETCH": "reliable",  # "reliable" (in-flight list per process) or "basic" (Sidekiq's BRPOP)
    "FETCH_BATCH_SIZE": 200,  # the most jobs one fetch takes (and a process buffers) when jobs are short
    "FETCH_BLOCK_SECONDS": 2.0,  # how long an idle fetch blocks (BLMOVE) before looking again
    "SERVER_MIDDLEWARE": [],  # dotted paths of jobsapp.middleware.ServerMiddleware subclasses
    "HEARTBEAT_INTERVAL_SECONDS": 5.0,
    "PROCESS_TTL_SECONDS": 60,
    "ORPHAN_SWEEP_INTERVAL_SECONDS": 15.0,
    "POISON_RECOVERY_LIMIT": 3,  # a job recovered this many times goes to the dead set
    "SCHEDULER_POLL_INTERVAL_SECONDS": 1.0,  # between two polls of the whole fleet (the processes take turns)
    # Periodic jobs: name -> {"class", "cron" or "every" (seconds), "args", "kwargs", "queue",
    # "timezone", "missed": "run_once" | "skip", "description"} (see jobsapp/periodic.py).
    "PERIODIC": {},
    # Queue -> the most jobs of that queue running at once across every process (jobsapp.limiter).
    "QUEUE_LIMITS": {},
    # How long a capped queue's slot outlives a worker killed while holding it (keep it above the
    # longest job of a capped queue: a job running longer loses its slot to another).
    "QUEUE_LIMIT_LOCK_TIMEOUT_SECONDS": 600.0,
    # sidekiq_options(timeout=...): a job still running this many seconds after its JobTimeout
    # was raised (a blocking C call ignores it) stops its worker process, which puts its other
    # jobs back and is restarted by -P's supervisor; the stuck job goes to retry. None: off.
    "TIMEOUT_HARD_LIMIT_SECONDS": None,
    # Failures.
    "MAX_RETRIES": 25,
    "DEAD_MAX_JOBS": 10_000,
    "DEAD_TIMEOUT_SECONDS": 180 * 24 * 3600,
    "ERROR_HANDLERS": [],  # dotted paths of callables (exception, context) -> None
    "DEATH_HANDLERS": [],  # dotted paths of callables (item, exception) -> None
    "ERROR_MESSAGE_MAX_CHARS": 10_000,
    # Results of jobs pushed with sidekiq_options(retain=seconds): the largest return value kept.
    "RESULT_MAX_BYTES": 512 * 1024,
    # ... and the most finished records kept: past it the ones closest to expiring are deleted.
    "RESULTS_MAX_RECORDS": 100_000,
    # runworkers' own log handler (installed only when the project has not configured the
    # jobsapp loggers): "text" (time, pid, thread, level) or "json" (one object a line). --log-format wins.
    "LOG_FORMAT": "text",
    # /jobs/metrics: a bearer token that may scrape without a staff session (None: staff only).
    "METRICS_TOKEN": None,
    # Display and logs: argument keys whose values are replaced by "[REDACTED]".
    "REDACT_KEYS": ["password", "passwd", "token", "secret", "authorization", "api_key", "apikey"],
}


class JobsSettings:
    """Attribute access to ``settings.JOBSAPP`` merged over DEFAULTS, read on every access."""

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"unknown jobsapp setting {name!r}")
        user = getattr(settings, "JOBSAPP", {}) or {}
        if name in user:
            return user[name]
        if name == "REDIS_URL":
            return getattr(settings, "REDIS_URL", None) or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        return DEFAULTS[name]

    def unknown_keys(self) -> list[str]:
        user = getattr(settings, "JOBSAPP", {}) or {}
        return sorted(set(user) - set(DEFAULTS))


jobs_settings = JobsSettings()
