"""Celery options this layer accepts but does not honour: each warns once per process.

docs/celery.md's table lists them with the reason. Options that would change what runs or when
(and cannot be honoured) are refused with TypeError instead, by the callers.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

_lock = threading.Lock()
_warned: set[str] = set()

#: Accepted and ignored, with why (shown in the warning).
IGNORED_OPTIONS: dict[str, str] = {
    "serializer": "payloads are always JSON",
    "compression": "payloads are not compressed",
    "acks_late": "jobs are always acknowledged after they run (reliable fetch)",
    "acks_on_failure_or_timeout": "a failed job is filed in retry or dead, never lost",
    "reject_on_worker_lost": "jobs of a dead worker are always recovered",
    "rate_limit": "use jobsapp.limiter or JOBSAPP['QUEUE_LIMITS']",
    "exchange": "there are no AMQP exchanges: queue= is the only routing",
    "routing_key": "there are no AMQP routing keys: queue= is the only routing",
    "producer": "pushes go through the engine's Redis pool",
    "publisher": "pushes go through the engine's Redis pool",
    "retry_policy": "a refused push raises jobsapp.RedisUnavailable at once",
    "retry": "a refused push raises jobsapp.RedisUnavailable at once",
    "add_to_parent": "results are not linked to a parent",
    "shadow": "the task's name is its wire name",
    "trail": "results are not linked to children",
    "send_events": "there are no Celery events: see the dashboard and /jobs/metrics",
    "store_errors_even_if_ignored": "ignored results store nothing",
    "throws": "every failure is logged the same way",
    "resultrepr_maxsize": "results are shown truncated by the dashboard",
    "autoregister": "tasks are always registered when defined",
    "abstract": "use a plain function",
    "route_name": "there are no routes: queue= is the only routing",
    "argsrepr": "the dashboard and the results store show the arguments as given: keep secrets out of them",
    "kwargsrepr": "the dashboard and the results store show the arguments as given: keep secrets out of them",
}

#: Refused with TypeError, with why: honouring them silently would change what the task receives.
REFUSED_OPTIONS: dict[str, str] = {}


_PACKAGE_DIRECTORY = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first caller outside jobsapp.celery, so the warning names the
    user's line (the decorator or the call), not this package's."""
    frame = sys._getframe(1)  # warn_unsupported: level 1
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIRECTORY):
        frame = frame.f_back
        level += 1
    return level


def warn_unsupported(option: str, reason: str | None = None) -> None:
    """A RuntimeWarning the first time ``option`` is used in this process, pointing at the user's code."""
    with _lock:
        if option in _warned:
            return
        _warned.add(option)
    why = reason or IGNORED_OPTIONS.get(option, "not supported")
    warnings.warn(f"jobsapp.celery ignores the Celery option {option!r}: {why}", RuntimeWarning, stacklevel=_user_stacklevel())


def check_options(options: dict[str, object], *, where: str) -> None:
    """Warn once for each ignored option; TypeError for an option Celery does not have either."""
    for option in options:
        if option in IGNORED_OPTIONS:
            warn_unsupported(option)
        elif option in REFUSED_OPTIONS:
            raise TypeError(f"{where}: the Celery option {option!r} is not supported: {REFUSED_OPTIONS[option]}")
        else:
            raise TypeError(f"{where} got an unexpected option {option!r}")
