"""The ``Job`` base class (alias ``Worker``) and ``sidekiq_options``: the surface users write against.

A job class declares options and a ``perform`` method. Class methods enqueue it:
``perform_async`` now, ``perform_in`` after a delay, ``perform_at`` at a time, ``perform_bulk`` many
at once, and ``set(...)`` for one-off option overrides. All of them build a Sidekiq item and hand it
to ``jobsapp.client``; the worker later builds a fresh instance per run and calls ``perform``.

Defining a subclass registers it under its wire name: the dotted Python path by default, or the
``class_name`` option (a Ruby-style ``"HardWorker"``) so Ruby and Python can share a queue.
A subclass whose ``perform`` is an ``async def`` is an async job (``is_async``): workers await it
on their event loop (``jobsapp.worker.aio``). An async generator is refused when the class is defined.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, ClassVar, TypeVar

from . import client, payload, registry
from . import options as option_rules
from . import transactions as _transactions
from .payload import Item

JobType = TypeVar("JobType", bound=type["Job"])

#: ``perform_in`` values below this are seconds from now; above, an epoch time (docs/payload.md).
EPOCH_THRESHOLD_SECONDS = 1_000_000_000


def sidekiq_options(**options: Any) -> Callable[[JobType], JobType]:
    """Class decorator: set options for a job class (merged over its parents').

    The engine reads Sidekiq's options (queue, retry, backtrace, retry_queue, dead, tags) and the
    wire name ``class_name``; any other option rides in every payload untouched (the tracking
    layer reads ``use_task_event`` from there).
    """

    option_rules.check(options)  # a bad value fails where the class is declared

    def apply(cls: JobType) -> JobType:
        previous_name = cls.wire_name()
        cls.sidekiq_options_hash = {**cls.sidekiq_options_hash, **options}
        registry.register(cls, cls.wire_name(), previous_name=previous_name)
        return cls

    return apply


class Job:
    """Base class of background jobs. Subclass it, define ``perform``, enqueue with ``perform_async``.

    Per run the worker sets ``jid``, ``item`` (the payload dict) and ``queue`` on the instance.
    """

    #: No "queue": a class without one goes to ``JOBSAPP["DEFAULT_QUEUE"]`` (Sidekiq's "default"
    #: unless set), read when each job is pushed.
    sidekiq_options_hash: ClassVar[dict[str, Any]] = {"retry": True}
    #: Set on abstract bases that should not be registered.
    abstract: ClassVar[bool] = True
    #: Whether workers run it on their event loop (``jobsapp.worker.aio``): set when the class is defined,
    #: True when ``perform`` is an ``async def``.
    is_async: ClassVar[bool] = False

    jid: str
    item: Item
    queue: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.sidekiq_options_hash = dict(cls.sidekiq_options_hash)
        if "abstract" not in cls.__dict__:
            cls.abstract = False
        if "is_async" not in cls.__dict__:
            if inspect.isasyncgenfunction(cls.perform):
                raise TypeError(
                    f"{cls.__module__}.{cls.__qualname__}.perform is an async generator (async def with yield): "
                    "a worker could not run it to the end; make it a plain async def (or def) that returns"
                )
            cls.is_async = inspect.iscoroutinefunction(cls.perform)
        if not cls.abstract:
            registry.register(cls, cls.wire_name())

    def perform(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__qualname__} must define perform()")

    # --- class-level configuration ---------------------------------------------------

    @classmethod
    def wire_name(cls) -> str:
        """The ``class`` string in payloads: ``class_name`` if set, else the dotted path."""
        return cls.sidekiq_options_hash.get("class_name") or f"{cls.__module__}.{cls.__qualname__}"

    @classmethod
    def get_sidekiq_options(cls) -> dict[str, Any]:
        return dict(cls.sidekiq_options_hash)

    @classmethod
    def sidekiq_retry_in(cls, count: int, exception: BaseException) -> float | str | None:
        """Override for a custom retry delay: seconds, ``"kill"`` (dead now), ``"discard"``, or
        None for Sidekiq's default backoff. ``count`` is the retry_count being scheduled (0 first)."""
        return None

    @classmethod
    def sidekiq_retries_exhausted(cls, item: Item, exception: BaseException) -> None:
        """Override to act when the last retry failed, before the job goes to the dead set."""

    # --- enqueueing ------------------------------------------------------------------

    @classmethod
    def set(cls, **options: Any) -> Setter:
        """Options for one push: ``Job.set(queue="critical").perform_async(1)``; also ``wait`` (seconds)
        and ``wait_until`` (datetime or epoch)."""
        return Setter(cls, options)

    @classmethod
    def perform_async(cls, *args: Any, **kwargs: Any) -> str | None:
        """Enqueue now (inside the project's ``transaction.atomic()``: when it commits, see
        ``jobsapp.transactions``); returns the jid, or None if a client middleware stopped the push."""
        return Setter(cls, {}).perform_async(*args, **kwargs)

    @classmethod
    def perform_in(cls, interval: float | dt.timedelta, *args: Any, **kwargs: Any) -> str | None:
        """Enqueue after ``interval`` seconds (or a timedelta); values >= 1e9 are epoch times."""
        return Setter(cls, {}).perform_in(interval, *args, **kwargs)

    @classmethod
    def perform_at(cls, when: float | dt.datetime, *args: Any, **kwargs: Any) -> str | None:
        """Enqueue at ``when`` (an aware or UTC-naive datetime, or epoch seconds)."""
        return Setter(cls, {}).perform_at(when, *args, **kwargs)

    @classmethod
    def perform_bulk(cls, args_list: Iterable[list[Any]], *, batch_size: int = 1000) -> list[str | None]:
        """Enqueue one job per argument list, ``batch_size`` per Redis round trip; returns the jids."""
        return Setter(cls, {}).perform_bulk(args_list, batch_size=batch_size)

    push_bulk = perform_bulk


Worker = Job


def _epoch(when: float | dt.datetime | dt.date) -> float:
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return when.timestamp()
    if isinstance(when, (int, float)) and not isinstance(when, bool):
        return float(when)
    raise TypeError(f"a run-at time must be a datetime or epoch seconds, not {type(when).__name__}")


def _delay_to_epoch(interval: float | dt.timedelta, now: float) -> float:
    if isinstance(interval, dt.timedelta):
        return now + interval.total_seconds()
    if isinstance(interval, bool) or not isinstance(interval, (int, float)):
        raise TypeError(f"an interval must be seconds or a timedelta, not {type(interval).__name__}")
    return float(interval) if interval >= EPOCH_THRESHOLD_SECONDS else now + float(interval)


class Setter:
    """A job class plus one-off options; what ``Job.set(...)`` returns."""

    def __init__(self, job_class: type[Job], options: dict[str, Any]) -> None:
        self.job_class = job_class
        self.options = dict(options)

    def set(self, **options: Any) -> Setter:
        return Setter(self.job_class, {**self.options, **options})

    def _defer(self) -> bool:
        """Push after commit? (``jobsapp.transactions``: inside the project's atomic block, unless
        ``on_commit=False`` was set for this call or class, or ENQUEUE_ON_COMMIT is False.)"""
        choice = self.options.get("on_commit", self.job_class.sidekiq_options_hash.get("on_commit"))
        return _transactions.should_defer(choice)

    def _push(self, item: Item) -> str | None:
        if self._defer():
            return _transactions.defer_push(item, partial(client.push, job_class=self.job_class))
        return client.push(item, job_class=self.job_class)

    def _item(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Item:
        if self.job_class.__dict__.get("abstract", False):
            # refused before anything is written: no worker would ever run it (it is not registered)
            raise TypeError(
                f"{self.job_class.__module__}.{self.job_class.__qualname__} is an abstract base class and cannot be enqueued; "
                "enqueue a subclass that defines perform() (in an app's jobs.py)"
            )

        options = {**self.job_class.sidekiq_options_hash, **self.options}
        options.pop("class_name", None)
        options.pop("on_commit", None)  # decides when to push; never rides in the payload
        wait = options.pop("wait", None)
        wait_until = options.pop("wait_until", None)
        item: Item = {"class": self.job_class.wire_name(), "args": list(args)}
        item.update(options)
        if kwargs:
            item["kwargs"] = kwargs
        if wait is not None:
            item["at"] = _delay_to_epoch(wait, payload.now())
        elif wait_until is not None:
            item["at"] = _epoch(wait_until)
        return item

    def perform_async(self, *args: Any, **kwargs: Any) -> str | None:
        return self._push(self._item(args, kwargs))

    def perform_in(self, interval: float | dt.timedelta, *args: Any, **kwargs: Any) -> str | None:
        item = self._item(args, kwargs)
        item["at"] = _delay_to_epoch(interval, payload.now())
        return self._push(item)

    def perform_at(self, when: float | dt.datetime, *args: Any, **kwargs: Any) -> str | None:
        item = self._item(args, kwargs)
        item["at"] = _epoch(when)
        return self._push(item)

    def perform_bulk(self, args_list: Iterable[list[Any]], *, batch_size: int = 1000) -> list[str | None]:
        item = self._item((), {})
        item.pop("args")
        bulk = {**item, "args": list(args_list)}
        if self._defer():
            return _transactions.defer_bulk(
                bulk, partial(client.push_bulk, batch_size=batch_size, job_class=self.job_class), batch_size=batch_size
            )
        return client.push_bulk(bulk, batch_size=batch_size, job_class=self.job_class)
