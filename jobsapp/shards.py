"""Shards: more than one Redis, each a complete, independent engine (Sidekiq's answer to "one
Redis is not enough"). A shard may itself be a Redis Cluster (``"REDIS_CLUSTER": True``): then its
key names carry hash tags, ``jobsapp.keys``, and ``"CLUSTER_PARTITIONS"`` spreads its queues over
the cluster's masters).

``JOBSAPP["SHARDS"]`` names the extra servers; the top-level connection settings are the shard
named ``"default"``::

    JOBSAPP = {
        "REDIS_URL": "redis://main:6379/0",                       # shard "default"
        "SHARDS": {
            "bulk": {"REDIS_URL": "redis://bulk:6379/0",
                     "QUEUES": ["imports"], "CLASSES": ["reports.jobs.BuildReport"]},
            "ha": {"SENTINELS": [["s1", 26379]], "SENTINEL_SERVICE": "jobs", "QUEUES": ["payments"]},
        },
    }

Routing is fixed by settings, never by load: a job goes to the shard that lists its class (wire
name), else the shard that lists its queue, else ``"default"``. So every producer sends a given
job to the same server, and a job never moves between shards: its retries, schedule and dead
entry stay where it was pushed. Each ``runworkers --shard NAME`` serves one shard (each shard
needs its own workers, which also run its scheduler); the dashboard and ``manage.py jobs`` show
one shard at a time.

Which shard the code in this process talks to, when it does not name one: the shard of the
current context (``using(name)``: the dashboard, per request), else the process's shard
(``use_for_process(name)``: ``runworkers --shard``, ``jobs --shard``), else ``"default"``.

This module only reads settings; ``jobsapp.connection`` turns a shard's settings into a client.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings

from .conf import DEFAULTS, jobs_settings
from .errors import UnknownShard

DEFAULT = "default"

#: Keys that say where a shard's Redis is; a shard entry needs one of the first three, and does
#: not inherit them from the top level (a shard silently pointing at the default server would
#: be two names for one Redis).
WHERE_KEYS = ("REDIS_URL", "REDIS_CACHE_ALIAS", "SENTINELS", "SENTINEL_SERVICE", "SENTINEL_OPTIONS", "REDIS_CLUSTER", "CLUSTER_PARTITIONS")
#: Keys a shard entry may set; when it omits one, the top-level value applies.
INHERITED_KEYS = ("REDIS_SOCKET_TIMEOUT_SECONDS", "ENQUEUE_REPLICAS", "ENQUEUE_REPLICAS_TIMEOUT_SECONDS")
#: Routing: which queues and job classes (wire names) live on the shard.
ROUTING_KEYS = ("QUEUES", "CLASSES")
SHARD_KEYS = (*WHERE_KEYS, *INHERITED_KEYS, *ROUTING_KEYS)

_context_shard: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobsapp_shard", default=None)
_process_shard: str | None = None


def _entries() -> dict[str, dict[str, Any]]:
    shards = jobs_settings.SHARDS
    return shards if isinstance(shards, dict) else {}


def names() -> list[str]:
    """Every shard name, ``"default"`` first."""
    return [DEFAULT, *(name for name in _entries() if name != DEFAULT)]


def _unknown(name: str) -> UnknownShard:
    return UnknownShard(f"no shard named {name!r}; the shards are: {', '.join(names())}")


def validate(name: str) -> str:
    """``name`` if it is a configured shard; UnknownShard (listing the known ones) otherwise."""
    if name == DEFAULT or name in _entries():
        return name
    raise _unknown(name)


def setting(shard: str, key: str) -> Any:
    """One connection setting of ``shard`` (a key of WHERE_KEYS or INHERITED_KEYS)."""
    if shard == DEFAULT:
        return getattr(jobs_settings, key)
    entry = _entries().get(shard)
    if entry is None:
        raise _unknown(shard)
    if key in entry:
        return entry[key]
    if key in WHERE_KEYS:
        return DEFAULTS[key]
    return getattr(jobs_settings, key)


def route(class_name: object, queue: object) -> str:
    """The shard a job of this class (wire name) and queue is pushed to."""
    entries = _entries()
    if not entries:
        return DEFAULT
    for name, entry in entries.items():
        if class_name in (entry.get("CLASSES") or ()):
            return name
    for name, entry in entries.items():
        if queue in (entry.get("QUEUES") or ()):
            return name
    return DEFAULT


def routed_queues(shard: str) -> list[str]:
    """The queues settings route to ``shard`` (what ``runworkers --shard`` serves by default)."""
    if shard == DEFAULT:
        return []
    return list(_entries().get(shard, {}).get("QUEUES") or [])


def setting_list(shard: str, key: str) -> list[str]:
    """A routing list of ``shard`` (a key of ROUTING_KEYS), [] when absent."""
    if shard == DEFAULT:
        return []
    return list(_entries().get(shard, {}).get(key) or [])


def current() -> str:
    """The shard this context talks to when it names none."""
    return _context_shard.get() or _process_shard or DEFAULT


def use_for_process(name: str) -> None:
    """Make ``name`` this process's shard (inherited by forked children)."""
    global _process_shard
    _process_shard = validate(name)


@contextmanager
def using(name: str) -> Iterator[str]:
    """Talk to ``name`` inside the block (this thread or task only)."""
    token = _context_shard.set(validate(name))
    try:
        yield name
    finally:
        _context_shard.reset(token)


def problems() -> list[str]:
    """What is wrong with ``SHARDS``, one sentence each (the system check jobsapp.E044 shows them)."""
    shards = jobs_settings.SHARDS
    if shards in (None, {}):
        return []
    if not isinstance(shards, dict):
        return [f"JOBSAPP['SHARDS'] must be a dict of shard name -> settings dict, not {type(shards).__name__}"]
    found: list[str] = []
    owners: dict[tuple[str, str], str] = {}
    for name, entry in shards.items():
        if not isinstance(name, str) or not name:
            found.append(f"shard name {name!r} is not a non-empty string")
            continue
        if name == DEFAULT:
            found.append('"default" is the top-level connection settings, not an entry of SHARDS')
            continue
        if not isinstance(entry, dict):
            found.append(f"shard {name!r} must be a dict of settings, not {type(entry).__name__}")
            continue
        unknown = sorted(set(entry) - set(SHARD_KEYS))
        if unknown:
            found.append(f"shard {name!r} has unknown key(s) {', '.join(map(str, unknown))} (known: {', '.join(SHARD_KEYS)})")
        if not any(entry.get(key) for key in ("REDIS_URL", "REDIS_CACHE_ALIAS", "SENTINELS")):
            found.append(f"shard {name!r} says nowhere where its Redis is: give it REDIS_URL, REDIS_CACHE_ALIAS or SENTINELS")
        alias = entry.get("REDIS_CACHE_ALIAS")
        if alias and alias not in getattr(settings, "CACHES", {}):
            found.append(f"shard {name!r}: REDIS_CACHE_ALIAS {alias!r} is not a cache in settings.CACHES")
        for key, kind in (("QUEUES", "queue"), ("CLASSES", "class")):
            listed = entry.get(key) or []
            if not isinstance(listed, (list, tuple)) or not all(isinstance(each, str) and each for each in listed):
                found.append(f"shard {name!r}: {key} must be a list of {kind} names")
                continue
            for each in listed:
                other = owners.setdefault((kind, each), name)
                if other != name:
                    found.append(f"{kind} {each!r} is routed to two shards, {other!r} and {name!r}")
    return found
