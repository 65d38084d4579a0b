"""The ordered middleware chains and what runs them: the client chain a push goes through, the
server chain around ``perform``, and the calls that tell server middleware and death handlers.

The hooks the chains call are ``jobsapp.middleware``'s base classes (``ClientMiddleware``,
``ServerMiddleware``). This module sits below the producing side (``jobsapp.client`` runs the client
chain on every push) and needs nothing of a job class but what ``registry.JobClass`` declares: a
chain's members are whatever objects ``JOBSAPP["CLIENT_MIDDLEWARE"]`` / ``["SERVER_MIDDLEWARE"]``
name, or code adds with add, remove, prepend, insert_before and insert_after (as in Sidekiq).
Instances are built once per chain and shared by every thread, so a middleware keeps no per-job
state on ``self``. A hook that raises in ``notify`` is logged and ignored: middleware never decides
where a job ends up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from .conf import jobs_settings
from .payload import Item

if TYPE_CHECKING:
    import redis

    from .registry import JobClass

logger = logging.getLogger("jobsapp.middleware")


class Chain:
    """An ordered list of middleware classes with their constructor arguments."""

    def __init__(self, entries: list[tuple[type, tuple[Any, ...], dict[str, Any]]] | None = None) -> None:
        self._entries = list(entries or [])
        self._instances: list[Any] | None = None
        self._lock = threading.Lock()

    def _changed(self) -> None:
        self._instances = None

    def _index(self, cls: type) -> int:
        for index, (entry_cls, _, _) in enumerate(self._entries):
            if entry_cls is cls:
                return index
        return -1

    def add(self, cls: type, *args: Any, **kwargs: Any) -> None:
        """Append ``cls`` (moving it to the end if it is already there)."""
        self.remove(cls)
        self._entries.append((cls, args, kwargs))
        self._changed()

    def prepend(self, cls: type, *args: Any, **kwargs: Any) -> None:
        """Put ``cls`` first (moving it if it is already there)."""
        self.remove(cls)
        self._entries.insert(0, (cls, args, kwargs))
        self._changed()

    def insert_before(self, existing: type, cls: type, *args: Any, **kwargs: Any) -> None:
        """Put ``cls`` just before ``existing`` (or first when ``existing`` is absent)."""
        self.remove(cls)
        index = self._index(existing)
        self._entries.insert(max(index, 0), (cls, args, kwargs))
        self._changed()

    def insert_after(self, existing: type, cls: type, *args: Any, **kwargs: Any) -> None:
        """Put ``cls`` just after ``existing`` (or last when ``existing`` is absent)."""
        self.remove(cls)
        index = self._index(existing)
        position = len(self._entries) if index < 0 else index + 1
        self._entries.insert(position, (cls, args, kwargs))
        self._changed()

    def remove(self, cls: type) -> None:
        index = self._index(cls)
        if index >= 0:
            del self._entries[index]
            self._changed()

    def clear(self) -> None:
        self._entries.clear()
        self._changed()

    def __contains__(self, cls: object) -> bool:
        return any(entry_cls is cls for entry_cls, _, _ in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def classes(self) -> list[type]:
        return [cls for cls, _, _ in self._entries]

    def instances(self) -> list[Any]:
        """The middleware objects in order, built once and shared by every thread."""
        instances = self._instances
        if instances is None:
            with self._lock:
                if self._instances is None:
                    self._instances = [cls(*args, **kwargs) for cls, args, kwargs in self._entries]
                instances = self._instances
        return instances

    def __iter__(self) -> Iterator[Any]:
        return iter(self.instances())


def _chain_from_setting(paths: list[str]) -> Chain:
    return Chain([(import_string(path), (), {}) for path in paths])


_chains: dict[str, Chain] = {}
_chains_lock = threading.Lock()


def client_chain() -> Chain:
    """The process-wide client chain, first built from ``CLIENT_MIDDLEWARE``."""
    chain = _chains.get("client")
    if chain is None:
        with _chains_lock:
            chain = _chains.setdefault("client", _chain_from_setting(list(jobs_settings.CLIENT_MIDDLEWARE)))
    return chain


def server_chain() -> Chain:
    """The process-wide server chain, first built from ``SERVER_MIDDLEWARE``."""
    chain = _chains.get("server")
    if chain is None:
        with _chains_lock:
            chain = _chains.setdefault("server", _chain_from_setting(list(jobs_settings.SERVER_MIDDLEWARE)))
    return chain


def reset_chains() -> None:
    """Rebuild both chains from settings on next use (tests that change the setting)."""
    with _chains_lock:
        _chains.clear()


def run_client_chain(job_class: type[JobClass] | None, item: Item, queue: str, redis: redis.Redis) -> Item | None:
    """Pass ``item`` through every client middleware; None when one of them stopped the push."""
    current: Item | None = item
    for middleware in client_chain().instances():
        current = middleware.call(job_class, current, queue, redis)
        if current is None:
            return None
    return current


def run_server_chain(job: object, item: Item, queue: str, final: Callable[[], Any]) -> Any:
    """Call ``final`` (the job's perform) inside every server middleware's ``call``."""
    return _run_chain(job, item, queue, final)


def _run_chain(job: object, item: Item, queue: str, final: Callable[[], Any]) -> Any:
    """The first middleware's ``call``, whose ``next`` calls the second's, ..., the last's calls
    ``final`` (nested ``partial``s built inside out: no closure per step and job)."""
    call = final
    for middleware in reversed(server_chain().instances()):
        call = partial(middleware.call, job, item, queue, call)
    return call()


def notify(hook: str, *args: Any, **kwargs: Any) -> None:
    """Call ``hook`` on every server middleware; a hook that raises is logged and ignored.

    Called by the "job ended" door (``jobsapp.ending``) for a job's hooks, so middleware and the
    engine's features always hear the same endings; and by ``tell_shutdown``."""
    for middleware in server_chain().instances():
        try:
            getattr(middleware, hook)(*args, **kwargs)
        except Exception:  # the job's fate is already decided; a failing hook must not change it
            logger.exception("server middleware %s.%s failed", type(middleware).__name__, hook)


def call_death_handlers(item: Item, exception: BaseException | None) -> None:
    """Call every ``JOBSAPP["DEATH_HANDLERS"]`` callable with ``(item, exception)``: the job will
    not run again (the retry policy, and an operator's kill as Sidekiq's API kill does). A handler
    that raises is logged and ignored."""
    for path in jobs_settings.DEATH_HANDLERS:
        try:
            import_string(path)(item, exception)
        except Exception:  # a broken handler must not change the job's fate
            logger.exception("death handler %s failed", path)


def tell_startup() -> None:
    """``on_startup`` on every server middleware that has it: the worker process has started its
    threads and takes jobs from now on (each ``-P`` child once)."""
    for middleware in server_chain().instances():
        if hasattr(middleware, "on_startup"):
            _notify_one(middleware, "on_startup")


def _notify_one(middleware: object, hook: str) -> None:
    """Call ``hook`` on one server middleware; a hook that raises is logged and ignored."""
    try:
        getattr(middleware, hook)()
    except Exception:  # a start-up hook must not stop the worker taking jobs
        logger.exception("server middleware %s.%s failed", type(middleware).__name__, hook)


def tell_shutdown() -> None:
    """``on_shutdown`` on every server middleware: the worker process is about to exit."""
    notify("on_shutdown")
