"""``celery.worker.state``: the bookkeeping of the worker running in this process, as Celery keeps it.

A worker in this process (``runworkers``, each of its ``-P`` children, or a test's ``start_worker``
thread) records here the Celery-style tasks it takes: ``requests`` (id -> ``Request``) and
``reserved_requests`` from ``task_received`` until the task ends, ``active_requests`` while it
runs, and on its end ``successful_requests`` (the last ``SUCCESSFUL_MAX`` ids that succeeded) and
``total_count`` (runs by task name). As in Celery this is the memory of one process: a process that
runs no worker has nothing here, and a test reading it must run its worker in the test process
(``jobsapp.celery.contrib.testing.worker.start_worker``, as Celery's ``celery_worker`` fixture
does). Where a process has said its worker runs elsewhere (``signals.worker_elsewhere``), reading
these sets raises ``NotImplementedError`` instead of answering empty forever.

``revoked`` holds the ids this process's worker found revoked or expired (a revocation itself is
fleet-wide, in Redis: ``AsyncResult(id).revoke()``); ``revoked_stamps`` is the fleet's revoked
stamps, kept in Redis (``jobsapp.celery.stamping``): ``clear()`` clears them for every worker.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Hashable, Iterator
from typing import Any

from .. import signals
from ..stamping import revoked_stamps

#: How many succeeded ids ``successful_requests`` keeps (Celery's default).
SUCCESSFUL_MAX = 1000
#: How many revoked ids ``revoked`` keeps (Celery's default).
REVOKES_MAX = 50000


def _readable(name: str) -> None:
    reason = signals._worker_elsewhere
    if reason is not None:
        raise NotImplementedError(
            f"celery.worker.state.{name} is the memory of the worker in this process, and this process runs none ({reason}): "
            "read AsyncResult(task_id).state or app.control.inspect(), or run the worker in this process (start_worker)"
        )


class LimitedSet:
    """A set that keeps its ``maxlen`` newest members (Celery's ``LimitedSet``, without expiry)."""

    def __init__(self, name: str, maxlen: int) -> None:
        self.name = name
        self.maxlen = maxlen
        self._members: dict[Hashable, None] = {}  # insertion order: the oldest first
        self._lock = threading.Lock()

    def add(self, member: Hashable) -> None:
        members = self._members
        with self._lock:
            members.pop(member, None)
            members[member] = None
            if len(members) > self.maxlen:
                del members[next(iter(members))]

    def discard(self, member: Hashable) -> None:
        with self._lock:
            self._members.pop(member, None)

    def clear(self) -> None:
        with self._lock:
            self._members.clear()

    def __contains__(self, member: object) -> bool:
        _readable(self.name)
        return member in self._members

    def __iter__(self) -> Iterator[Hashable]:
        _readable(self.name)
        with self._lock:
            return iter(list(self._members))

    def __len__(self) -> int:
        _readable(self.name)
        return len(self._members)

    def __repr__(self) -> str:
        return f"<LimitedSet {self.name}: {len(self._members)} of at most {self.maxlen}>"


class RequestSet:
    """The requests of the tasks a worker here holds (``reserved_requests``, ``active_requests``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._members: dict[str, Any] = {}

    # one dict operation each, atomic in CPython: no lock on a task's way through
    def add(self, request: Any) -> None:
        self._members[request.id] = request

    def discard(self, request: Any) -> None:
        self._members.pop(request.id, None)

    def clear(self) -> None:
        self._members.clear()

    def __contains__(self, request: object) -> bool:
        _readable(self.name)
        return getattr(request, "id", None) in self._members

    def __iter__(self) -> Iterator[Any]:
        _readable(self.name)
        return iter(list(self._members.values()))

    def __len__(self) -> int:
        _readable(self.name)
        return len(self._members)


class RequestsById(dict[str, Any]):
    """``requests``: id -> ``Request`` of every task a worker here holds."""

    def __getitem__(self, key: str) -> Any:
        _readable("requests")
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        _readable("requests")
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        _readable("requests")
        return super().__iter__()

    def __len__(self) -> int:
        _readable("requests")
        return super().__len__()


requests: dict[str, Any] = RequestsById()
reserved_requests = RequestSet("reserved_requests")
active_requests = RequestSet("active_requests")
successful_requests = LimitedSet("successful_requests", SUCCESSFUL_MAX)
revoked = LimitedSet("revoked", REVOKES_MAX)
#: Runs ended, by task name (Celery's ``total_count``).
total_count: Counter[str] = Counter()
_count_lock = threading.Lock()


def task_reserved(request: Any) -> None:
    """A worker here took the task (``task_received`` is sent next)."""
    dict.__setitem__(requests, request.id, request)
    reserved_requests.add(request)


def task_accepted(request: Any) -> None:
    """The task starts running."""
    active_requests.add(request)


def task_ready(request: Any, *, successful: bool = False, stored: bool = True) -> None:
    """The task's run ended (``successful``: it returned). A success is counted in
    ``successful_requests`` once its result is stored, as Celery's worker counts it (``stored``
    False: the result is written after the run, which calls ``task_stored`` then)."""
    reserved_requests.discard(request)
    active_requests.discard(request)
    dict.pop(requests, request.id, None)
    if successful and stored:
        successful_requests.add(request.id)
    with _count_lock:
        total_count[request.name] += 1


def task_stored(request: Any) -> None:
    """The succeeded task's result is written (``task_ready(..., stored=False)`` before it)."""
    successful_requests.add(request.id)


def reset_state() -> None:
    """Forget everything recorded here (Celery's ``reset_state``)."""
    dict.clear(requests)
    reserved_requests.clear()
    active_requests.clear()
    successful_requests.clear()
    revoked.clear()
    with _count_lock:
        total_count.clear()


__all__ = [
    "REVOKES_MAX",
    "SUCCESSFUL_MAX",
    "LimitedSet",
    "active_requests",
    "requests",
    "reserved_requests",
    "reset_state",
    "revoked",
    "revoked_stamps",
    "successful_requests",
    "task_accepted",
    "task_ready",
    "task_reserved",
    "total_count",
]
