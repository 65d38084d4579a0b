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
    # Producing side.
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    "CLIENT_MIDDLEWARE": [],  # dotted paths of jobsapp.middleware.ClientMiddleware subclasses
    "DEFAULT_QUEUE": "default",
    # Consuming side (runworkers flags override these).
    "QUEUES": ["default"],
    "CONCURRENCY": 10,
    "PROCESSES": 1,
    "SHUTDOWN_TIMEOUT_SECONDS": 25.0,
    "TAG": "",
    "LABELS": [],
    "FETCH": "reliable",  # "reliable" (in-flight list per process) or "basic" (Sidekiq's BRPOP)
    "FETCH_BATCH_SIZE": 20,  # jobs taken from Redis in one round trip when queues are busy
    "FETCH_BLOCK_SECONDS": 2.0,  # how long an idle fetch blocks (BLMOVE) before looking again
    "SERVER_MIDDLEWARE": [],  # dotted paths of jobsapp.middleware.ServerMiddleware subclasses
    "HEARTBEAT_INTERVAL_SECONDS": 5.0,
    "PROCESS_TTL_SECONDS": 60,
    "ORPHAN_SWEEP_INTERVAL_SECONDS": 15.0,
    "POISON_RECOVERY_LIMIT": 3,  # a job recovered this many times goes to the dead set
    "SCHEDULER_POLL_INTERVAL_SECONDS": 1.0,  # upper bound of a scheduler sleep, jittered
    # Failures.
    "MAX_RETRIES": 25,
    "DEAD_MAX_JOBS": 10_000,
    "DEAD_TIMEOUT_SECONDS": 180 * 24 * 3600,
    "ERROR_HANDLERS": [],  # dotted paths of callables (exception, context) -> None
    "DEATH_HANDLERS": [],  # dotted paths of callables (item, exception) -> None
    "ERROR_MESSAGE_MAX_CHARS": 10_000,
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
