"""Celery's signals (``from celery.signals import task_prerun`` becomes ``from jobsapp.celery.signals
import task_prerun``), sent with Celery's names and arguments at Celery's moments.

    @task_failure.connect
    def report(sender=None, task_id=None, exception=None, **kwargs): ...

    @task_prerun.connect(sender=add)            # only for one task (its name works too)
    def before_add(task_id, task, args, kwargs, **extra): ...

Where each is sent (the process and thread named are where receivers run):

- ``before_task_publish`` / ``after_task_publish``: the pushing thread, around the push of one
  task (``sender`` the task's name; ``body`` ``(args, kwargs, embed)``, ``headers`` with ``id``,
  ``task``, ``root_id``, ``parent_id``, ``group_id``, ``retries``, ``eta``, ``expires``;
  ``routing_key`` and ``exchange`` are the queue's name and ``""``). ``before`` may change
  ``headers`` in place: extra keys ride with the task into ``self.request``, as in Celery.
- ``task_received``: the worker thread, when it takes the task, before anything runs
  (``request``: the task's request, ``sender`` None: there is no consumer object).
- ``task_prerun`` (``task_id``, ``task``, ``args``, ``kwargs``), then ``task_success``
  (``result``) or ``task_failure`` (``task_id``, ``exception``, ``args``, ``kwargs``,
  ``traceback``, ``einfo``) or ``task_retry`` (``request``, ``reason``, ``einfo``), then
  ``task_postrun`` (``retval``, ``state``): the worker thread running the task; ``sender`` the task.
- ``task_revoked`` (``request``, ``terminated``, ``signum``, ``expired``): where the revocation
  is seen: the revoking caller, or the worker that finds an expired task.
- ``worker_ready`` / ``worker_shutdown``: the worker process (each ``-P`` child once), when it
  starts taking jobs and when it is about to exit; ``sender`` None (there is no consumer or
  worker object). They travel through the engine's server middleware hooks ``on_startup`` and
  ``on_shutdown``: ``WorkerSignals`` joins the server chain when a receiver connects to either of
  them, or (a receiver connected before Django's settings were loaded) when a task is declared.

A receiver that raises is logged (``jobsapp.celery.signals``) and the others still run, as
Celery's ``Signal.send`` does; nothing a receiver does changes what becomes of the task.

``task_received``, ``worker_ready`` and ``worker_shutdown`` are sent only by a worker process. A
process that knows its worker runs elsewhere (a test process driving a ``runworkers``
subprocess, where Celery's test worker would be a thread of the test process) says so with
``worker_elsewhere(reason)``: connecting a receiver to one of them there is then a
``NotImplementedError`` instead of a receiver that is silently never called.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..middleware import ServerMiddleware, server_chain

logger = logging.getLogger("jobsapp.celery.signals")

Receiver = Callable[..., Any]


def _sender_key(sender: Any) -> Any:
    """Senders match by identity, or a task by its name (Celery code passes either)."""
    name = getattr(sender, "name", None)
    return name if isinstance(name, str) and name else sender


class Signal:
    """A named signal: ``connect`` receivers (as a decorator too), ``send`` to them."""

    def __init__(self, name: str, providing_args: set[str] | None = None) -> None:
        self.name = name
        self.providing_args = frozenset(providing_args or ())
        self._lock = threading.Lock()
        self._receivers: list[tuple[Any, Any, Any]] = []  # (lookup key, sender key, receiver or weak reference)

    def __repr__(self) -> str:
        return f"<Signal: {self.name}>"

    def connect(self, *args: Any, **kwargs: Any) -> Any:
        """``@signal.connect``, ``@signal.connect(sender=..., weak=..., dispatch_uid=...)`` or ``signal.connect(function)``."""
        if args and callable(args[0]):
            return self._connect(args[0], **kwargs)

        def decorate(receiver: Receiver) -> Receiver:
            return self._connect(receiver, **kwargs)

        return decorate

    def _connect(self, receiver: Receiver, sender: Any = None, weak: bool = True, dispatch_uid: Any = None) -> Receiver:
        lookup = (dispatch_uid if dispatch_uid is not None else _receiver_id(receiver), _sender_key(sender) if sender is not None else None)
        reference: Any = receiver
        if weak:
            reference = weakref.WeakMethod(receiver) if hasattr(receiver, "__self__") else weakref.ref(receiver)
        with self._lock:
            if not any(existing == lookup for existing, _, _ in self._receivers):
                self._receivers.append((lookup, lookup[1], reference))
        return receiver

    def disconnect(self, receiver: Receiver | None = None, sender: Any = None, weak: bool = True, dispatch_uid: Any = None) -> bool:
        lookup = (dispatch_uid if dispatch_uid is not None else _receiver_id(receiver), _sender_key(sender) if sender is not None else None)
        with self._lock:
            kept = [entry for entry in self._receivers if entry[0] != lookup]
            removed = len(kept) != len(self._receivers)
            self._receivers = kept
        return removed

    @property
    def receivers(self) -> list[Receiver]:
        return [receiver for _, receiver in self._live(None, any_sender=True)]

    def has_listeners(self, sender: Any = None) -> bool:
        return bool(self._live(sender))

    def _live(self, sender: Any, *, any_sender: bool = False) -> list[tuple[Any, Receiver]]:
        key = _sender_key(sender) if sender is not None else None
        found, dead = [], []
        with self._lock:
            entries = list(self._receivers)
        for entry in entries:
            lookup, wanted, reference = entry
            receiver = reference() if isinstance(reference, weakref.ref) else reference
            if receiver is None:
                dead.append(lookup)
                continue
            if any_sender or wanted is None or wanted == key or wanted is sender:
                found.append((lookup, receiver))
        if dead:
            with self._lock:
                self._receivers = [entry for entry in self._receivers if entry[0] not in dead]
        return found

    def send(self, sender: Any, **named: Any) -> list[tuple[Receiver, Any]]:
        """Call every receiver for ``sender``; returns ``[(receiver, response)]``. A receiver that
        raises is logged, and its response is the exception."""
        responses: list[tuple[Receiver, Any]] = []
        for _, receiver in self._live(sender):
            try:
                response = receiver(signal=self, sender=sender, **named)
            except Exception as exc:  # Celery's send logs a receiver's error and goes on
                logger.exception("signal %s: receiver %r raised", self.name, receiver)
                response = exc
            responses.append((receiver, response))
        return responses

    send_robust = send


def _receiver_id(receiver: Any) -> Any:
    if hasattr(receiver, "__self__") and hasattr(receiver, "__func__"):
        return (id(receiver.__self__), id(receiver.__func__))
    return id(receiver)


#: Why no worker runs in this process (``worker_elsewhere``), or None: the worker's own signals take receivers.
_worker_elsewhere: str | None = None


@contextmanager
def worker_elsewhere(reason: str) -> Iterator[None]:
    """Within this block, connecting a receiver to a signal only a worker sends (``task_received``,
    ``worker_ready``, ``worker_shutdown``) raises ``NotImplementedError`` with ``reason``: this
    process runs no worker, so the receiver would never be called (connect it in a module the
    worker imports instead)."""
    global _worker_elsewhere
    previous, _worker_elsewhere = _worker_elsewhere, reason
    try:
        yield
    finally:
        _worker_elsewhere = previous


class _SentByWorkers(Signal):
    """A signal only a worker process sends: refused to receivers where ``worker_elsewhere`` says none runs."""

    def _connect(self, receiver: Receiver, sender: Any = None, weak: bool = True, dispatch_uid: Any = None) -> Receiver:
        if _worker_elsewhere is not None:
            raise NotImplementedError(
                f"{self.name} is sent in a worker process, and this process runs none "
                f"({_worker_elsewhere}): connect the receiver in a module the worker imports (its tasks.py)"
            )
        return super()._connect(receiver, sender=sender, weak=weak, dispatch_uid=dispatch_uid)


before_task_publish = Signal("before_task_publish", {"body", "exchange", "routing_key", "headers", "properties", "declare", "retry_policy"})
after_task_publish = Signal("after_task_publish", {"body", "exchange", "routing_key"})
task_received = _SentByWorkers("task_received", {"request"})
task_prerun = Signal("task_prerun", {"task_id", "task", "args", "kwargs"})
task_postrun = Signal("task_postrun", {"task_id", "task", "args", "kwargs", "retval", "state"})
task_success = Signal("task_success", {"result"})
task_retry = Signal("task_retry", {"request", "reason", "einfo"})
task_failure = Signal("task_failure", {"task_id", "exception", "args", "kwargs", "traceback", "einfo"})
task_internal_error = Signal("task_internal_error", {"task_id", "args", "kwargs", "request", "exception", "traceback", "einfo"})
task_revoked = Signal("task_revoked", {"request", "terminated", "signum", "expired"})
task_rejected = Signal("task_rejected", {"message", "exc"})
task_unknown = Signal("task_unknown", {"message", "exc", "name", "id"})
worker_init = Signal("worker_init")
worker_process_init = Signal("worker_process_init")


class WorkerSignals(ServerMiddleware):
    """The server middleware that sends ``worker_ready`` and ``worker_shutdown``."""

    def on_startup(self) -> None:
        worker_ready.send(sender=None)

    def on_shutdown(self) -> None:
        worker_shutdown.send(sender=None)


def install_worker_signals() -> None:
    """Put ``WorkerSignals`` in the server chain (once) when either signal has a receiver (a job
    pays nothing for signals nobody hears). Before Django's settings are loaded (a ``celery.py``
    imported from the project package) there is no chain yet: the next task declared or receiver
    connected afterwards installs it."""
    from django.conf import settings

    if not settings.configured or not (worker_ready.receivers or worker_shutdown.receivers):
        return
    chain = server_chain()
    if WorkerSignals not in chain:
        chain.add(WorkerSignals)


class _WorkerSignal(_SentByWorkers):
    """A signal sent by ``WorkerSignals``: connecting to it installs that middleware."""

    def _connect(self, receiver: Receiver, sender: Any = None, weak: bool = True, dispatch_uid: Any = None) -> Receiver:
        connected = super()._connect(receiver, sender=sender, weak=weak, dispatch_uid=dispatch_uid)
        install_worker_signals()
        return connected


worker_ready = _WorkerSignal("worker_ready")
worker_shutdown = _WorkerSignal("worker_shutdown")
import_modules = Signal("import_modules")

__all__ = [
    "Signal",
    "WorkerSignals",
    "after_task_publish",
    "before_task_publish",
    "import_modules",
    "install_worker_signals",
    "task_failure",
    "task_internal_error",
    "task_postrun",
    "task_prerun",
    "task_received",
    "task_rejected",
    "task_retry",
    "task_revoked",
    "task_success",
    "task_unknown",
    "worker_elsewhere",
    "worker_init",
    "worker_process_init",
    "worker_ready",
    "worker_shutdown",
]
