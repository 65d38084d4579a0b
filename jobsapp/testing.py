"""Test modes for users' code, like Sidekiq::Testing: fake, inline, or real (disabled).

- fake: pushes are collected in memory, per wire class name, after client middleware ran
  (scheduled jobs keep their ``at``); ``jobs()``, ``drain()``, ``drain_all()``, ``clear_all()``
  inspect and run them. Nothing touches Redis. ``unique_for`` holds as with Redis: a second push
  of the same job while the first holds its lock returns None; the lock ends when the collected
  job runs (at its start or its success, as ``unique_until`` says), when it is cleared, or
  ``unique_for`` seconds after its run-at time.
- inline: a push runs the job at once in the calling thread, through the server middleware
  chain, and its exception propagates to the caller (no retry).
- disabled: the real client (the default).

Modes switch globally or for a block, and nest::

    from jobsapp import testing

    with testing.fake_mode():
        ImportRow.perform_async(1)
        assert len(testing.jobs(ImportRow)) == 1
        testing.drain(ImportRow)

    with testing.inline_mode():
        ImportRow.perform_async(1)      # ran already
"""

from __future__ import annotations

import copy
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from . import client, registry, unique
from .middleware import run_server_chain
from .payload import Item
from .result_writer import run_recorded
from .worker import aio, timeouts

if TYPE_CHECKING:
    from .job import Job


_lock = threading.RLock()
_queued: dict[str, list[Item]] = defaultdict(list)
#: Fake mode's unique locks: digest -> when the lock lapses (epoch seconds).
_unique_locks: dict[str, float] = {}
_mode = "disabled"


def _name(job_class: type[Job] | str) -> str:
    return job_class if isinstance(job_class, str) else job_class.wire_name()


def _collect(job_class: type[registry.JobClass] | None, item: Item) -> bool:
    """Keep the push; False (refused, as Redis would) while its unique lock is held."""
    with _lock:
        digest = item.get(unique.DIGEST_KEY)
        if isinstance(digest, str):
            now = time.time()
            if _unique_locks.get(digest, 0.0) > now:
                return False
            run_at = item.get("at")
            delay_seconds = max(0.0, float(run_at) - now) if isinstance(run_at, (int, float)) else 0.0
            _unique_locks[digest] = now + float(item.get("unique_for") or 0) + delay_seconds
        _queued[str(item["class"])].append(copy.deepcopy(item))
        return True


def _release_unique(item: Item, *, moment: str) -> None:
    digest = item.get(unique.DIGEST_KEY)
    if isinstance(digest, str) and item.get("unique_until", "success") == moment:
        with _lock:
            _unique_locks.pop(digest, None)


def _run_now(job_class: type[registry.JobClass] | None, item: Item) -> None:
    execute(copy.deepcopy(item))


def execute(item: Item) -> Any:
    """Run one item as a worker would (registered class only, server middleware around it)."""
    job_class = registry.lookup(item.get("class"))
    job = job_class()
    job.jid = str(item.get("jid", ""))
    job.item = item
    job.queue = str(item.get("queue", "default"))
    args = item.get("args", [])
    kwargs = item.get("kwargs") or {}
    call_perform = lambda: job.perform(*args, **kwargs)  # noqa: E731
    if job_class.is_async:  # awaited on a new loop in this thread (jobsapp.worker.aio)
        call_perform = partial(aio.perform, call_perform, timeout_seconds=timeouts.timeout_seconds(item))
    return run_recorded(job, item, lambda: run_server_chain(job, item, job.queue, call_perform))


def set_mode(mode: str) -> None:
    """ "fake", "inline" or "disabled" for the whole process."""
    global _mode
    if mode == "fake":
        client.interceptor = _collect
    elif mode == "inline":
        client.interceptor = _run_now
    elif mode == "disabled":
        client.interceptor = None
    else:
        raise ValueError(f'unknown testing mode {mode!r}: use "fake", "inline" or "disabled"')
    _mode = mode


def mode() -> str:
    return _mode


@contextmanager
def _mode_block(new_mode: str) -> Iterator[None]:
    previous = _mode
    set_mode(new_mode)
    try:
        yield
    finally:
        set_mode(previous)


def fake_mode() -> Any:
    """Context manager: collect pushes in memory."""
    return _mode_block("fake")


def inline_mode() -> Any:
    """Context manager: run pushed jobs at once."""
    return _mode_block("inline")


def disabled() -> Any:
    """Context manager: talk to Redis for real."""
    return _mode_block("disabled")


def jobs(job_class: type[Job] | str | None = None) -> list[Item]:
    """The collected items of one class (or of all classes, in push order per class)."""
    with _lock:
        if job_class is None:
            return [item for items in _queued.values() for item in items]
        return list(_queued.get(_name(job_class), []))


def clear(job_class: type[Job] | str) -> None:
    with _lock:
        for item in _queued.pop(_name(job_class), []):
            _unique_locks.pop(str(item.get(unique.DIGEST_KEY)), None)


def clear_all() -> None:
    with _lock:
        _queued.clear()
        _unique_locks.clear()


def perform_one(job_class: type[Job] | str) -> Any:
    """Run the oldest collected job of the class; IndexError when there is none."""
    with _lock:
        items = _queued.get(_name(job_class))
        if not items:
            raise IndexError(f"no collected jobs for {_name(job_class)}")
        item = items.pop(0)
    _release_unique(item, moment="start")
    result = execute(item)  # a failure keeps a "success" lock, as a retry would
    _release_unique(item, moment="success")
    return result


def drain(job_class: type[Job] | str) -> int:
    """Run the class's collected jobs, including those they enqueue, until none is left."""
    count = 0
    while jobs(job_class):
        perform_one(job_class)
        count += 1
    return count


def drain_all() -> int:
    """Run every collected job, of any class, until nothing is left."""
    count = 0
    while True:
        with _lock:
            names = [name for name, items in _queued.items() if items]
        if not names:
            return count
        for name in names:
            count += drain(name)
