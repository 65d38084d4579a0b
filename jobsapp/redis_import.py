"""Importing redis-py, first thing in ``jobsapp``: without the OpenTelemetry metrics SDK.

redis-py 8 imports ``opentelemetry.sdk.metrics`` when it is installed, only to note that it is
(``redis.observability.providers.OTEL_AVAILABLE``, which redis-py reads nowhere): its metrics
go through the OpenTelemetry *API* to the ``MeterProvider`` the application sets, whose SDK the
application imports itself. That note is a third of redis-py's import time, paid by every
process (a ``runworkers`` parent before it forks, each web process) where the SDK happens to be
installed, tracing or not.

So ``jobsapp/__init__.py`` imports this module before any engine module imports redis: the SDK
is hidden for the length of redis-py's import (a ``None`` entry in ``sys.modules`` makes that
one import fail as "not installed") and visible again right after, to the application and to
redis-py's own metrics (``tests/jobsapp/test_startup_imports.py`` records them). When redis-py
or the SDK is already imported (by the settings, another app), nothing is done.
"""

from __future__ import annotations

import sys

#: The OpenTelemetry package redis-py imports only to note that it is installed.
METRICS_SDK = "opentelemetry.sdk.metrics"


def import_redis() -> None:
    """Import redis-py, with ``METRICS_SDK`` hidden from it unless someone imported it already."""
    if "redis" in sys.modules or METRICS_SDK in sys.modules:
        return
    sys.modules[METRICS_SDK] = None  # type: ignore[assignment]  # None: "not installed", for this import only
    try:
        import redis  # noqa: F401  (imported for its side effect: the one import, in sys.modules)
    finally:
        if METRICS_SDK in sys.modules and sys.modules[METRICS_SDK] is None:
            del sys.modules[METRICS_SDK]


import_redis()
