"""Celery-style tasks on the engine: the ``Task`` that ``shared_task``/``task`` return (decorators.py).

Producing side (any thread): ``delay``/``apply_async`` push a Sidekiq item through
``jobsapp.client`` under the task's name (``module.function`` by default, as Celery), with
``retain`` set so ``AsyncResult`` can read the outcome (unless ``ignore_result``); ``countdown``
and ``eta`` go to the schedule set; ``task_id`` becomes the jid.

A task is an instance of a subclass of ``Task`` (of ``base=`` when given) made by the decorator,
as Celery makes them: options are class attributes, the function is ``run``. ``apply_async``
checks the call's arguments against the function first (``typing``), as Celery's.

Consuming side (a processor thread): a task that expired, or that carries a stamp revoked since
(``stamping.revoked_by``: one Redis read, only for a stamped task), ends REVOKED unrun; otherwise
the task's ``CeleryJob`` sets ``self.request`` (id, retries, args, kwargs, stamps...), runs the
function (given the task first with ``bind=True``) as Celery's tracer does (``before_start``,
``soft_time_limit``, ``on_success`` / ``on_failure`` / ``on_retry`` / ``after_return``: see
trace.py), and on success
pushes what follows it (``follow_up``: its link callbacks, the next step of a chain, a chord part
recorded and, with the last one, the chord's callback job pushed in the same script).
Failures follow Celery's rules through the engine's retry machinery:

- ``self.retry(...)`` or an ``autoretry_for`` exception raises ``Retry``: the job goes to the
  retry set and runs again after ``countdown`` seconds (``default_retry_delay``, or the backoff),
  same jid, ``request.retries`` one higher; past ``max_retries`` the task fails with ``exc`` (or
  ``MaxRetriesExceededError``);
- any other exception fails the task at once: the dead set (an operator may retry it by hand),
  FAILURE in its result, and the steps of its chain and its chord's callback are marked failed
  with its error (``AsyncResult.get()`` of a chain's last task raises it, as Celery's does);
- ``Ignore``: acknowledged, nothing more recorded, nothing follows; ``Reject``: the dead set
  (FAILURE), or with ``requeue=True`` back to the queue through the retry set.

``update_state`` writes a state and metadata of the task's own into its result record (the
results writer's thread, in order with the record's other changes), shown by ``AsyncResult``
while the task runs. ``apply`` runs a task eagerly in the caller's thread (``EagerResult``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import os
import random
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, Generic, ParamSpec, TypeVar

from .. import outbox, result_writer, results, transactions
from ..errors import JobTimeout
from ..functions import FunctionJob, job_class_for
from ..payload import RECOVERED_KEY, Item, check_json_native, compact_json, new_jid, now
from ..priority import PRIORITY_KEY, from_celery, of_item, to_celery
from ..worker import aio, timeouts
from . import current, follow_up, lineage, replacing, signals, stamping
from .canvas import (
    CHAIN_KEY,
    CHORD_KEY,
    ENGINE_RETRY_LIMIT,
    ERRBACK_KEY,
    EXPIRES_KEY,
    HEADERS_KEY,
    HONOURED_OPTIONS,
    LINK_KEY,
    NotRegistered,
    Signature,
    _epoch,
    always_eager,
)
from .canvas import chunks as chunks_signature
from .canvas import xmap as map_signature
from .canvas import xstarmap as starmap_signature
from .control import mark_revoked
from .exception_fields import exception_fields
from .exceptions import (
    Ignore,
    MaxRetriesExceededError,
    Reject,
    Retry,
    SoftTimeLimitExceeded,
    TaskPredicate,
    TaskRevokedError,
    TimeLimitExceeded,
)
from .options import check_options
from .result import AsyncResult, EagerResult
from .result import AsyncResult as _AsyncResult  # the class, where a method named AsyncResult shadows it
from .states import FAILURE, IGNORED, REJECTED, RETRY, STARTED, SUCCESS
from .trace import ExceptionInfo, call_handler, running, soft_limit
from .values import RESULT_EXPIRES_SECONDS, _jsonable, decoded
from .worker import request as worker_request
from .worker import state as worker_state

Params = ParamSpec("Params")
Returned = TypeVar("Returned", covariant=True)
TaskType = TypeVar("TaskType", bound="Task[Any, Any]")

SOFT_TIME_LIMIT_KEY = "celery_soft_time_limit"  # seconds; the hard one is the engine's "timeout"

_tasks_lock = current.tasks_lock
_tasks: dict[str, Task[Any, Any]] = current.tasks


def lookup(name: str) -> Task[Any, Any]:
    """The task defined under ``name`` in this process."""
    task = _tasks.get(name)
    if task is None:
        raise NotRegistered(f"no Celery-style task named {name!r} is defined in this process")
    return task


class Context:
    """``self.request``: what Celery tells a running task about itself."""

    def __init__(self, **fields: Any) -> None:
        self.id: str | None = None
        self.retries = 0
        self.args: list[Any] = []
        self.kwargs: dict[str, Any] = {}
        self.called_directly = True
        self.is_eager = False
        #: When the task was due (ISO 8601, as Celery's), for one pushed with ``countdown``/``eta``; else None.
        self.eta: str | None = None
        self.expires: float | None = None
        self.headers: dict[str, Any] | None = None
        self.delivery_info: dict[str, Any] = {}
        self.hostname: str | None = None
        self.task: str | None = None
        self.timelimit: tuple[float | None, float | None] = (None, None)
        # where the task comes from (lineage.py) and the message properties the caller gave
        self.root_id: str | None = None
        self.parent_id: str | None = None
        self.group: str | None = None
        self.group_index: int | None = None
        self.replaced_task_nesting = 0
        self.properties: dict[str, Any] = {}
        self.reply_to: str | None = None
        self.correlation_id: str | None = None
        self.chord: dict[str, Any] | None = None
        self.callbacks: list[dict[str, Any]] | None = None
        self.errbacks: list[dict[str, Any]] | None = None
        self.chain: list[dict[str, Any]] | None = None
        #: the task's stamps (``Signature.stamp``): header -> value, and the stamped headers' names
        self.stamps: dict[str, Any] = {}
        self.stamped_headers: list[str] = []
        #: the job's payload (a worker's run only): what a retry or a replacement changes
        self.item: Item | None = None
        # where update_state reports: the result record's lifetime, a tracked job's event handle,
        # and an eager run's state (Task.apply keeps it in the EagerResult, not in Redis)
        self.retain_seconds: float | None = None
        self.task_event: Any = None
        self.eager_state: tuple[str, Any] | None = None
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"<Context {self.__dict__!r}>"

    @property
    def time_limit(self) -> float | None:
        """The hard time limit of this call (``time_limit``), None without one."""
        return self.timelimit[0]

    @property
    def soft_time_limit(self) -> float | None:
        """The soft time limit of this call (``soft_time_limit``), None without one."""
        return self.timelimit[1]

    def lineage_fields(self, item: Item) -> None:
        """Fill the request's lineage and properties from a job's payload (lineage.REQUEST_KEY)."""
        fields = item.get(lineage.REQUEST_KEY)
        fields = fields if isinstance(fields, dict) else {}
        self.root_id = fields.get("root_id") or self.id
        self.parent_id = fields.get("parent_id")
        self.group = fields.get("group_id")
        self.group_index = fields.get("group_index")
        self.replaced_task_nesting = int(fields.get("replaced_task_nesting") or 0)
        self.properties = dict(fields.get("properties") or {})
        self.reply_to = self.properties.get("reply_to")
        self.correlation_id = self.properties.get("correlation_id") or self.id
        chord = item.get(CHORD_KEY)
        self.chord = chord if isinstance(chord, dict) else None
        self.chain = item.get(CHAIN_KEY) or None
        self.callbacks = item.get(LINK_KEY) or None
        self.errbacks = item.get(ERRBACK_KEY) or None
        eta = fields.get("eta")
        self.eta = eta if isinstance(eta, str) else None
        stamps = item.get(stamping.STAMPS_KEY)
        if isinstance(stamps, dict) and stamps:
            self.stamps = decoded(stamps)
            self.stamped_headers = list(stamps)


def _module_level_stand_in(function: Callable[..., Any]) -> Callable[..., Any]:
    """A function that calls ``function``, named as if it were defined at module level."""

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    stand_in.__module__ = function.__module__
    stand_in.__name__ = stand_in.__qualname__ = function.__name__
    stand_in.__doc__ = function.__doc__
    return stand_in


def current_request() -> tuple[Task[Any, Any], Context] | None:
    """The task running in this thread and its request, None outside one (task loggers read it)."""
    stack = running()
    return stack[-1] if stack else None


@contextlib.contextmanager
def _requesting(task: Task[Any, Any], request: Context) -> Iterator[None]:
    """``task.request`` (and ``current_request()``) is ``request`` inside this block, in this thread."""
    own = task._local.__dict__.setdefault("stack", [])
    shared = running()
    own.append(request)
    shared.append((task, request))
    try:
        yield
    finally:
        own.pop()
        shared.pop()


class CeleryJob(FunctionJob):
    """The engine job behind one Celery-style task."""

    abstract = True
    task: Any  # the Task (a ClassVar, set per function)

    @classmethod
    def sidekiq_retry_in(cls, count: int, exception: BaseException) -> float | str | None:
        """``Retry`` waits its countdown; anything else is final (dead set, FAILURE)."""
        if isinstance(exception, Retry):
            return float(exception.countdown if exception.countdown is not None else cls.task.default_retry_delay)
        return "kill"

    def perform(self, *args: Any, **kwargs: Any) -> Any:
        return type(self).task._execute(self, list(args), dict(kwargs))


class Task(Generic[Params, Returned]):
    """A Celery-style task: call it, ``delay`` it, ``apply_async`` it, ``apply`` it, sign it.

    The decorators make one subclass per function (of ``base=`` when given, which must subclass
    this class) and one instance of it, as Celery does: the options are class attributes, the
    function is ``run``, and a ``base=`` class may add attributes, properties (a cached database
    connection) and the handlers below. ``__init__`` takes no arguments and may be overridden.
    """

    MaxRetriesExceededError = MaxRetriesExceededError

    # Celery's task options, as class attributes (the decorator's arguments override them).
    name: str = ""
    bind: bool = False
    queue: str | None = None
    max_retries: int | None = 3
    default_retry_delay: float = 180
    autoretry_for: tuple[type[BaseException], ...] = ()
    dont_autoretry_for: tuple[type[BaseException], ...] = ()
    retry_kwargs: dict[str, Any] = {}  # Celery's class attribute, replaced, never mutated
    retry_backoff: bool | int = False
    retry_backoff_max: int = 600
    retry_jitter: bool = True
    ignore_result: bool = False
    expires: float | dt.datetime | None = None
    soft_time_limit: float | None = None
    time_limit: float | None = None
    #: Celery's priority on its Redis transport, 0 (first) to 9; None: a plain job (jobsapp.priority.from_celery)
    priority: int | None = None
    #: Check a call's arguments against the function's signature when it is pushed (Celery's default).
    typing: bool = True
    #: Report STARTED while the task runs (None: the app's ``task_track_started``, False by default,
    #: so a running task is PENDING, as Celery's).
    track_started: bool | None = None
    #: jobsapp's own: record the task's runs as tracking events (``update_state`` then reports progress)
    use_task_event: bool = False

    function: Callable[..., Any]
    job_class: type[FunctionJob]
    rng: random.Random
    _local: threading.local

    def __init__(self) -> None:
        """Nothing to set: options are class attributes; the decorator registers the instance."""

    def _register(self, *, explicit_name: bool) -> None:
        """Check the options and register the job class that runs this task (called once, by the decorator)."""
        function = self.function
        self.rng = random.Random()
        self._local = threading.local()
        is_async = inspect.iscoroutinefunction(function)
        if self.bind and is_async:
            # self.request is per thread, and the coroutine runs on the worker's event loop thread
            raise TypeError(
                f"{self.name}: bind=True is not supported on an async def task (self.request would not be this call's); "
                "use a plain def task to bind, or drop bind"
            )
        if self.soft_time_limit is not None:
            if is_async:
                raise TypeError(
                    f"{self.name}: soft_time_limit cannot interrupt an async def task; use time_limit (it cancels the coroutine)"
                )
            timeouts.positive_seconds(self.soft_time_limit, option="soft_time_limit")
        options: dict[str, Any] = {"retry": ENGINE_RETRY_LIMIT}
        if self.queue:
            options["queue"] = self.queue
        if self.time_limit is not None:
            options[timeouts.TIMEOUT_KEY] = timeouts.positive_seconds(self.time_limit, option="time_limit")
        if self.use_task_event:
            options["use_task_event"] = True
        registered = function
        if "<locals>" in getattr(function, "__qualname__", ""):
            # a task declared inside a function (Celery allows it: named module.function): it runs
            # where it is defined (apply, or a worker that defines it the same way)
            registered = _module_level_stand_in(function)
            explicit_name = True
        self.job_class = job_class_for(
            registered, base=CeleryJob, name=self.name if explicit_name else None, attributes={"task": self}, options=options
        )
        self.__name__ = getattr(function, "__name__", self.name)
        with _tasks_lock:
            _tasks[self.name] = self
        signals.install_worker_signals()  # worker_ready / worker_shutdown reach this process's receivers

    def __repr__(self) -> str:
        return f"<@task: {self.name}>"

    # --- calling here and now ------------------------------------------------------------

    def run(self, *args: Params.args, **kwargs: Params.kwargs) -> Returned:
        """The function itself (given this task first when ``bind=True``)."""
        if self.bind:
            return self.function(self, *args, **kwargs)
        return self.function(*args, **kwargs)

    def __call__(self, *args: Params.args, **kwargs: Params.kwargs) -> Returned:
        """A plain call in this thread (``request.called_directly`` is True)."""
        return self.run(*args, **kwargs)

    def apply(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        link: Any = None,
        link_error: Any = None,
        task_id: str | None = None,
        retries: int | None = None,
        throw: bool | None = None,
        logfile: str | None = None,
        loglevel: int | None = None,
        headers: dict[str, Any] | None = None,
        **options: Any,
    ) -> EagerResult[Returned]:
        """Run the task here and now as a worker would (``request.is_eager``): handlers, autoretry
        (a retry runs again at once, ``request.retries`` one higher), ``update_state``; returns an
        ``EagerResult``. ``throw`` raises the task's error here instead of storing it."""
        result = self._apply_once(args, kwargs, task_id=task_id, retries=retries, throw=throw, headers=headers, **options)
        if link is not None or link_error is not None:  # callbacks and errbacks run here too, as Celery's eager apply
            self._eager_follow_ups(result, link, link_error)
        return result

    def _eager_follow_ups(self, result: EagerResult[Any], link: Any, link_error: Any) -> None:
        """``link`` callbacks applied with the value, or ``link_error`` errbacks called as a
        worker calls them (``follow_up.call_errbacks``), here, after an eager run."""
        callbacks = link if isinstance(link, list | tuple) else [link] if link is not None else []
        errbacks = link_error if isinstance(link_error, list | tuple) else [link_error] if link_error is not None else []
        if result.state == SUCCESS:
            for callback in callbacks:
                Signature(dict(callback)).apply((result.result,))
        elif result.state == FAILURE and isinstance(result.result, BaseException):
            error = result.result
            request = Context(id=result.id, task=self.name, is_eager=True, called_directly=False)
            follow_up.call_errbacks(
                [dict(each) for each in errbacks], result.id, error, request=request, traceback_text=result.traceback, eager=True
            )

    def _apply_once(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        task_id: str | None = None,
        retries: int | None = None,
        throw: bool | None = None,
        headers: dict[str, Any] | None = None,
        **options: Any,
    ) -> EagerResult[Returned]:
        passed_on = {name for name in options if name in HONOURED_OPTIONS or name in stamping.immutable_options(options)}
        check_options({name: value for name, value in options.items() if name not in passed_on}, where=f"{self.name}.apply()")
        arguments, keywords = list(args or ()), dict(kwargs or {})
        request = Context(
            id=task_id or new_jid(),
            retries=retries or 0,
            args=arguments,
            kwargs=keywords,
            called_directly=False,
            is_eager=True,
            headers=headers,
            delivery_info={"is_eager": True, "redelivered": False},
            hostname=results.worker_name(),
            task=self.name,
            timelimit=(self.time_limit, self.soft_time_limit),
        )
        task_id = str(request.id)
        own_item = {lineage.REQUEST_KEY: lineage.request_fields(task_id, options), stamping.STAMPS_KEY: stamping.stamps_of(options)}
        request.lineage_fields(own_item)
        with lineage.publishing_from(request.root_id, task_id), _requesting(self, request):
            try:
                value = self._attempt(request, arguments, keywords, soft_seconds=self.soft_time_limit, async_timeout=self.time_limit)
            except Ignore as ignored:
                state, value = IGNORED, ignored
            except Reject as rejected:
                state, value = REJECTED, rejected
            except Retry as retry:
                self._retried(request, retry)
                if throw:
                    raise
                return self._apply_once(
                    request.args, request.kwargs, task_id=task_id, retries=request.retries + 1, throw=throw, headers=headers, **options
                )
            except Exception as exc:  # FAILURE, stored in the EagerResult (raised here with throw)
                self._failed(request, exc)
                if throw:
                    raise
                return EagerResult(task_id, exc, FAILURE, traceback=ExceptionInfo(exc).traceback, name=self.name)
            else:
                value = decoded(_jsonable(value))  # what a worker's result would give back
                self._succeeded(request, value)
                state = SUCCESS
        if request.eager_state is not None and state == IGNORED:
            state, value = request.eager_state
        return EagerResult(task_id, value, state, name=self.name)

    # --- enqueueing ----------------------------------------------------------------------

    def delay(self, *args: Params.args, **kwargs: Params.kwargs) -> _AsyncResult[Returned]:
        """``apply_async(args, kwargs)``."""
        return self.apply_async(args, kwargs)

    def delay_on_commit(self, *args: Params.args, **kwargs: Params.kwargs) -> None:
        """``delay`` once the current database transaction commits (at once outside one). With
        ``JOBSAPP["OUTBOX"]`` on, inside the project's transaction, the push is written to the
        outbox in it (``jobsapp.transactions.commit_bound``), as ``Job.perform_async``'s."""
        from django.db import transaction

        if transactions.in_project_transaction() and outbox.enabled():
            with transactions.commit_bound():
                self.apply_async(args, kwargs)
            return
        transaction.on_commit(lambda: self.apply_async(args, kwargs))

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Signature[Any] | list[Signature[Any]] | None = None,
        link_error: Signature[Any] | list[Signature[Any]] | None = None,
        shadow: str | None = None,
        *,
        countdown: float | None = None,
        eta: dt.datetime | None = None,
        expires: float | dt.datetime | None = None,
        queue: str | None = None,
        headers: dict[str, Any] | None = None,
        ignore_result: bool | None = None,
        soft_time_limit: float | None = None,
        time_limit: float | None = None,
        **options: Any,
    ) -> _AsyncResult[Returned]:
        """Push the task; returns its ``AsyncResult`` (its id is the job's jid). With ``typing``
        (the default), arguments the function cannot take are a TypeError here, as Celery's."""
        if self.typing:
            self._check_arguments(args or (), kwargs or {})
        if always_eager():  # app.conf.task_always_eager: run here, as Celery's
            eager = {name: options.pop(name) for name in ("throw", "retries", *stamping.immutable_options(options)) if name in options}
            return self.apply(args, kwargs, task_id=task_id, headers=headers, **eager)
        extra = {name: value for name, value in (("producer", producer), ("shadow", shadow)) if value is not None}
        stamp_options = stamping.immutable_options(options)
        passed_on = {name: options.pop(name) for name in list(options) if name in HONOURED_OPTIONS or name in stamp_options}
        check_options({**extra, **options}, where=f"{self.name}.apply_async()")
        honoured: dict[str, Any] = {
            "task_id": task_id,
            "countdown": countdown,
            "eta": eta,
            "expires": expires,
            "queue": queue,
            "headers": headers,
            "ignore_result": ignore_result,
            "link": link,
            "link_error": link_error,
            "soft_time_limit": soft_time_limit,
            "time_limit": time_limit,
        }
        given = {key: value for key, value in {**passed_on, **honoured}.items() if value is not None}
        call: Signature[Returned] = Signature(self.name, args, kwargs, **given)
        return call.apply_async()

    def _check_arguments(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """TypeError when the function cannot be called with ``args`` and ``kwargs``."""
        try:
            signature = inspect.signature(self.function)
        except (TypeError, ValueError):  # a builtin or C function without a signature: not checked, as Celery
            return
        try:
            if self.bind:
                signature.bind(self, *args, **kwargs)
            else:
                signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None

    def _push(
        self,
        args: list[Any],
        kwargs: dict[str, Any],
        *,
        task_id: str | None = None,
        countdown: float | None = None,
        eta: dt.datetime | float | None = None,
        expires: float | dt.datetime | None = None,
        queue: str | None = None,
        headers: dict[str, Any] | None = None,
        ignore_result: bool | None = None,
        chain: list[dict[str, Any]] | None = None,
        chord: dict[str, Any] | None = None,
        soft_time_limit: float | None = None,
        time_limit: float | None = None,
        link: list[dict[str, Any]] | None = None,
        link_error: list[dict[str, Any]] | None = None,
        request: dict[str, Any] | None = None,
        priority: int | None = None,
        stamps: dict[str, Any] | None = None,
    ) -> str:
        options: dict[str, Any] = {"on_commit": False}  # Celery pushes at once; delay_on_commit waits
        task_id = task_id or new_jid()
        options["jid"] = task_id
        request = dict(request) if request is not None else lineage.request_fields(task_id)
        if eta is not None or countdown:  # the request's eta, as Celery's (ISO 8601)
            due = _epoch(eta) if eta is not None else now() + float(countdown or 0)
            request["eta"] = dt.datetime.fromtimestamp(due, dt.UTC).isoformat()
        options[lineage.REQUEST_KEY] = request
        message, headers = lineage.before_publish(
            self.name,
            task_id,
            args,
            kwargs,
            queue=queue or self.queue or "default",
            request=request,
            headers=headers,
            eta=eta,
            expires=expires,
            stamps=stamps,
        )
        if queue:
            options["queue"] = queue
        keep = not (self.ignore_result if ignore_result is None else ignore_result)
        if keep or chord is not None or chain or link:
            options["retain"] = RESULT_EXPIRES_SECONDS
        expires = self.expires if expires is None else expires
        if expires is not None:
            options[EXPIRES_KEY] = _epoch(expires) if isinstance(expires, dt.datetime) else now() + float(expires)
        if headers:
            options[HEADERS_KEY] = headers
        if chain:
            options[CHAIN_KEY] = _jsonable(chain)  # signatures inside become plain dicts
        if chord is not None:
            options[CHORD_KEY] = _jsonable(chord)
        options.update(self._limit_options(soft_time_limit, time_limit))
        celery_priority = self.priority if priority is None else priority
        if celery_priority is not None:
            options[PRIORITY_KEY] = from_celery(celery_priority)
        if link:
            options[LINK_KEY] = _jsonable(link)
        if link_error:
            options[ERRBACK_KEY] = _jsonable(link_error)
        if stamps:
            options[stamping.STAMPS_KEY] = _jsonable(stamps)
        setter = self.job_class.set(**options)
        args, kwargs = _jsonable(args), _jsonable(kwargs)
        if eta is not None:
            jid = setter.perform_at(_epoch(eta), *args, **kwargs)
        elif countdown:
            jid = setter.perform_in(float(countdown), *args, **kwargs)
        else:
            jid = setter.perform_async(*args, **kwargs)
        if jid is None:
            raise RuntimeError(f"a client middleware stopped the push of {self.name}; nothing was enqueued")
        lineage.after_publish(self.name, message, args, kwargs, queue=queue or self.queue or "default")
        return jid

    def _limit_options(self, soft_time_limit: float | None, time_limit: float | None) -> dict[str, Any]:
        """The payload fields of a call's time limits (the task's own unless the call gives them)."""
        options: dict[str, Any] = {}
        soft = self.soft_time_limit if soft_time_limit is None else soft_time_limit
        hard = self.time_limit if time_limit is None else time_limit
        if soft is not None and hard is not None and soft > hard:
            raise ValueError(f"{self.name}: soft_time_limit must be less than or equal to time_limit ({soft} > {hard})")
        if soft is not None:
            if inspect.iscoroutinefunction(self.function):
                raise TypeError(f"{self.name}: soft_time_limit cannot interrupt an async def task; use time_limit")
            options[SOFT_TIME_LIMIT_KEY] = timeouts.positive_seconds(soft, option="soft_time_limit")
        if time_limit is not None:
            options[timeouts.TIMEOUT_KEY] = timeouts.positive_seconds(time_limit, option="time_limit")
        return options

    # --- signatures ------------------------------------------------------------------------

    def signature(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, *, immutable: bool = False, **options: Any
    ) -> Signature[Returned]:
        return Signature(self.name, args, kwargs, immutable=immutable, **options)

    subtask = signature

    def s(self, *args: Any, **kwargs: Any) -> Signature[Returned]:
        """A partial call: a chain's previous result is prepended to ``args``."""
        return self.signature(args, kwargs)

    def si(self, *args: Params.args, **kwargs: Params.kwargs) -> Signature[Returned]:
        """An immutable signature: it ignores the previous result in a chain."""
        return self.signature(args, kwargs, immutable=True)

    def AsyncResult(self, task_id: str, **kwargs: Any) -> _AsyncResult[Returned]:
        return AsyncResult(task_id, task_name=self.name)

    # --- handlers a base= class may override (called as Celery 5 calls them) ----------------

    def before_start(self, task_id: str, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Before the task runs (each attempt). Its exception fails the task."""

    def on_success(self, retval: Any, task_id: str, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """After the task returned ``retval``; then ``after_return``."""

    def on_failure(self, exc: BaseException, task_id: str, args: Sequence[Any], kwargs: dict[str, Any], einfo: Any) -> None:
        """After the task failed for good with ``exc`` (``einfo``: an ``ExceptionInfo``); then ``after_return``."""

    def on_retry(self, exc: BaseException | None, task_id: str, args: Sequence[Any], kwargs: dict[str, Any], einfo: Any) -> None:
        """After the task asked to be retried (``exc``: the reason given to ``retry``, if any)."""

    def after_return(self, status: str, retval: Any, task_id: str, args: Sequence[Any], kwargs: dict[str, Any], einfo: Any) -> None:
        """Last, after SUCCESS or FAILURE (never after RETRY, REJECTED or IGNORED); ``einfo`` is None."""

    @property
    def backend(self) -> Any:
        """The result store, as Celery's ``task.backend``."""
        from .result import ResultBackend

        return ResultBackend()

    @property
    def app(self) -> Any:
        """The current app (``jobsapp.celery.Celery``): the one made last, or a default one."""
        return current.current_or_default_app()

    def _tracks_started(self) -> bool:
        """Whether a run reports STARTED (``track_started``, else the app's ``task_track_started``)."""
        if self.track_started is not None:
            return bool(self.track_started)
        return bool(self.app.conf.task_track_started)

    # --- inside a worker -------------------------------------------------------------------

    def replace(self, sig: Any) -> Any:
        """Replace this running task by ``sig`` (a task, chain, group or chord), as Celery 5's
        ``Task.replace``: ``sig`` is pushed now with what followed this task (the rest of its
        chain, its callbacks and errbacks, its place in a chord), this task's result becomes
        ``sig``'s (``AsyncResult(this id).get()`` returns ``sig``'s value), and ``Ignore`` is
        raised to end this run. Eager (``apply``): ``sig`` runs here and its value is returned.
        ``sig`` carries this task's stamps, and goes through ``on_replace``."""
        return replacing.replace(self, self.request, sig)

    def on_replace(self, sig: Any) -> Any:
        """Called by ``replace`` with the replacement, ready to be pushed (Celery 5.3's hook: it may
        stamp it); must return ``super().on_replace(sig)``, which pushes it and ends the run."""
        return replacing.send_replacement(self.request, sig)

    def add_to_chord(self, sig: Any, lazy: bool = False) -> Any:
        """Add ``sig`` to the chord this task is a header part of (Celery's ``add_to_chord``)."""
        return replacing.add_to_chord(self, self.request, sig, lazy=lazy)

    @property
    def request(self) -> Context:
        """The running call's context; a "called directly" one outside a worker."""
        stack: list[Context] = getattr(self._local, "stack", [])
        return stack[-1] if stack else Context(task=self.name)

    def update_state(self, task_id: str | None = None, state: str | None = None, meta: Any = None, **kwargs: Any) -> None:
        """Report a state of the task's own (``"PROGRESS"``) and its metadata while it runs:
        ``AsyncResult.state`` and ``.info`` show them until the task ends. For a tracked task
        (``use_task_event=True``), ``meta`` with ``current`` and ``total`` also moves the
        progress bar. ``meta`` must be JSON-native."""
        if state is None:
            raise TypeError(f"{self.name}.update_state() needs a state (a name such as 'PROGRESS')")
        request = self.request
        task_id = task_id or request.id
        if task_id is None:
            raise RuntimeError(f"{self.name}.update_state() was called outside a worker: pass task_id=")
        check_json_native(meta, "update_state() meta")
        if request.is_eager and task_id == request.id:
            request.eager_state = (state, meta)
            return
        own = task_id == request.id
        retain = request.retain_seconds if own and request.retain_seconds else RESULT_EXPIRES_SECONDS
        fields = {results.CUSTOM_STATE_FIELD: str(state), results.CUSTOM_META_FIELD: compact_json(meta)}
        # the running task's own report is not waited for; another task's (or one from outside a worker) is
        result_writer.write_fields(task_id, fields, retain_seconds=retain, wait=not own)
        event = request.task_event if own else None
        if event is not None and isinstance(meta, dict):
            current, total = meta.get("current"), meta.get("total")
            if type(current) is int and type(total) is int and total > 0:
                event.next_message_reports(current, total)
                event.add_message(f"{state}: {current} of {total}")

    def retry(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: dt.datetime | None = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Retry:
        """Raise ``Retry`` to run again later (same id, ``request.retries`` + 1), or ``exc`` (or
        ``MaxRetriesExceededError``) when no retries are left. ``args``/``kwargs`` replace the
        arguments of the next run, as Celery's; ``expires`` gives it an expiry."""
        expires = options.pop("expires", None)
        headers = options.pop("headers", None)
        check_options(options, where=f"{self.name}.retry()")
        if args is not None and not isinstance(args, list | tuple):
            # self.retry(exc, countdown=10): Celery takes a positional exception as args too
            raise TypeError(f"{self.name}.retry(args=...) takes the next run's arguments as a list or tuple; pass an exception as exc=")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError(f"{self.name}.retry(kwargs=...) takes the next run's keyword arguments as a dict")
        request = self.request
        args, kwargs = self._retry_arguments(request, args, kwargs)
        item = request.item
        if item is not None and (args is not None or kwargs is not None or expires is not None or headers):
            # the retried payload is this job's item: what changes here rides into the next run
            if args is not None:
                item["args"] = _jsonable(list(args))
                request.args = list(args)
            if kwargs is not None:
                item["kwargs"] = _jsonable(dict(kwargs))
                request.kwargs = dict(kwargs)
            if expires is not None:
                item[EXPIRES_KEY] = _epoch(expires) if isinstance(expires, dt.datetime) else now() + float(expires)
            if headers:
                item[HEADERS_KEY] = {**(item.get(HEADERS_KEY) or {}), **headers}
        elif request.is_eager and (args is not None or kwargs is not None):
            request.args = list(args) if args is not None else request.args
            request.kwargs = dict(kwargs) if kwargs is not None else request.kwargs
        exc = exc if exc is not None else sys.exc_info()[1]
        if request.called_directly:
            if exc is not None:
                raise exc
            raise RuntimeError(f"{self.name}.retry() was called outside a worker")
        limit = self.max_retries if max_retries is None else max_retries
        if limit is not None and request.retries >= limit:
            if exc is not None:
                raise exc
            raise self.MaxRetriesExceededError(f"Can't retry {self.name}[{request.id}] args:{request.args} kwargs:{request.kwargs}")
        if eta is not None:
            countdown = max(0.0, _epoch(eta) - now())
        if countdown is None:
            countdown = self.default_retry_delay
        raise Retry(exc=exc, countdown=countdown)

    def _parameters(self) -> list[inspect.Parameter] | None:
        """The task body's parameters as a caller passes them (without the bound task), None when unknown."""
        try:
            parameters = list(inspect.signature(self.function).parameters.values())
        except (TypeError, ValueError):
            return None
        return parameters[1:] if self.bind else parameters

    def _retry_arguments(
        self, request: Context, args: Sequence[Any] | None, kwargs: dict[str, Any] | None
    ) -> tuple[Sequence[Any] | None, dict[str, Any] | None]:
        """Arguments of the next run when ``retry`` gives only ``args`` or only ``kwargs``: the
        inherited ones that do not clash with the new way of passing them are kept, as Celery does."""
        parameters = self._parameters()
        if parameters is None:
            return args, kwargs
        by_name = {each.name: each for each in parameters}
        if args is not None and kwargs is None and request.kwargs:
            positional = [each for each in parameters if each.kind in (each.POSITIONAL_ONLY, each.POSITIONAL_OR_KEYWORD)]
            taken = {each.name for each in positional[: len(args)] if each.kind == each.POSITIONAL_OR_KEYWORD}
            return args, {name: value for name, value in request.kwargs.items() if name not in taken}
        if kwargs is not None and args is None and request.args:
            positional = [each for each in parameters if each.kind in (each.POSITIONAL_ONLY, each.POSITIONAL_OR_KEYWORD)]
            if any(each.kind == each.VAR_POSITIONAL for each in parameters) or len(request.args) > len(positional):
                return args, kwargs
            inherited = dict(zip((each.name for each in positional), request.args, strict=False))
            new_kwargs = dict(kwargs)
            for name in list(new_kwargs):
                if name in inherited and by_name[name].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD:
                    inherited[name] = new_kwargs.pop(name)
            names = [each.name for each in positional if each.name in inherited]
            return [inherited[name] for name in names], new_kwargs
        return args, kwargs

    def _backoff_seconds(self, retries: int) -> float:
        if not self.retry_backoff:
            return float(self.retry_kwargs.get("countdown", self.default_retry_delay))
        factor = 1 if self.retry_backoff is True else int(self.retry_backoff)
        countdown = min(self.retry_backoff_max, factor * (2**retries))
        return float(self.rng.randrange(countdown + 1) if self.retry_jitter else countdown)

    def _autoretries(self, exception: BaseException) -> bool:
        return (
            bool(self.autoretry_for)
            and isinstance(exception, self.autoretry_for)
            and not (self.dont_autoretry_for and isinstance(exception, self.dont_autoretry_for))
        )

    def _attempt(
        self, request: Context, args: list[Any], kwargs: dict[str, Any], *, soft_seconds: float | None, async_timeout: float | None
    ) -> Any:
        """One attempt as Celery's tracer runs it: ``before_start``, the task under its soft
        limit, ``autoretry_for``; the time limit's ``JobTimeout`` becomes ``TimeLimitExceeded``."""
        task_id = str(request.id)
        try:
            self.before_start(task_id, args, kwargs)
            value = soft_limit(soft_seconds, lambda: self.run(*args, **kwargs), name=self.name, task_id=task_id)
            if inspect.iscoroutine(value):  # an async def task: awaited on this worker's loop (jobsapp.worker.aio)
                value = aio.run(value, timeout_seconds=async_timeout)
            return value
        except TaskPredicate:
            raise  # Retry, Ignore, Reject: the caller decides
        except BaseException as exc:  # autoretry turns it into Retry (or re-raises it when no retries are left)
            if isinstance(exc, JobTimeout) and not isinstance(exc, SoftTimeLimitExceeded | TimeLimitExceeded):
                raise TimeLimitExceeded(f"{self.name}[{task_id}] ran past its time_limit: {exc}") from exc
            if self._autoretries(exc):
                self.retry(exc=exc, countdown=self._backoff_seconds(request.retries), max_retries=self.retry_kwargs.get("max_retries"))
            raise

    def _succeeded(self, request: Context, value: Any) -> None:
        task_id = str(request.id)
        call_handler(self.on_success, value, task_id, request.args, request.kwargs)
        call_handler(self.after_return, SUCCESS, value, task_id, request.args, request.kwargs, None)

    def _failed(self, request: Context, exc: BaseException) -> None:
        task_id = str(request.id)
        call_handler(self.on_failure, exc, task_id, request.args, request.kwargs, ExceptionInfo(exc))
        call_handler(self.after_return, FAILURE, exc, task_id, request.args, request.kwargs, None)

    def _retried(self, request: Context, retry: Retry) -> None:
        call_handler(self.on_retry, retry.exc, str(request.id), request.args, request.kwargs, ExceptionInfo(retry))

    def _execute(self, job: FunctionJob, args: list[Any], kwargs: dict[str, Any]) -> Any:
        item = job.item
        args, kwargs = decoded(args), decoded(kwargs)  # kombu's typed JSON values back into Python ones
        done, previous_value = follow_up.resumed(item)
        expires_at = item.get(EXPIRES_KEY)
        if not done:
            self._end_if_revoked(job, item, expires_at)
        retry_count = item.get("retry_count")
        soft_seconds = item.get(SOFT_TIME_LIMIT_KEY)
        soft_seconds = timeouts.positive_seconds(soft_seconds, option="soft_time_limit") if soft_seconds is not None else None
        timeout = timeouts.timeout_seconds(item)
        request = Context(
            id=job.jid,
            retries=retry_count + 1 if type(retry_count) is int else 0,
            args=args,
            kwargs=kwargs,
            called_directly=False,
            expires=expires_at,
            headers=item.get(HEADERS_KEY),
            delivery_info={
                "queue": job.queue,
                "routing_key": job.queue,
                "redelivered": retry_count is not None or RECOVERED_KEY in item,
                "priority": to_celery(of_item(item)),
            },
            hostname=results.worker_name(),
            task=self.name,
            timelimit=(timeout, soft_seconds),
            retain_seconds=results.safe_retain_seconds(item),
            task_event=getattr(job, "task_event", None),
        )
        request.lineage_fields(item)
        request.item = item
        with lineage.publishing_from(request.root_id, job.jid):  # what this run pushes descends from it
            return self._execute_request(job, item, request, args, kwargs, done=done, previous_value=previous_value)

    def _end_if_revoked(self, job: FunctionJob, item: Item, expires_at: Any) -> None:
        """Raise ``TaskRevokedError`` (the task ends REVOKED unrun, what depends on it failed with
        it) when the task expired, or when one of its stamps was revoked (one Redis read, only for
        a task that carries stamps)."""
        expired = isinstance(expires_at, (int, float)) and now() > expires_at
        stamps = item.get(stamping.STAMPS_KEY)
        revoking = stamping.revoked_by(stamps) if not expired and isinstance(stamps, dict) and stamps else None
        if not expired and revoking is None:
            return
        reason = "expired before it started" if expired else f"revoked by stamped header {revoking}"
        error = TaskRevokedError(f"{self.name}[{job.jid}] {reason}")
        if results.safe_retain_seconds(item):  # REVOKED before what depends on it fails, as Celery's backend records it
            mark_revoked(job.jid, message=str(error))
        self._fail_dependents(item, error)
        signals.task_revoked.send(sender=self, request=Context(id=job.jid, task=self.name), terminated=False, signum=None, expired=expired)
        worker_state.revoked.add(job.jid)
        raise error

    def _execute_request(
        self, job: FunctionJob, item: Item, request: Context, args: list[Any], kwargs: dict[str, Any], *, done: bool, previous_value: Any
    ) -> Any:
        """One run of the task for its job (``_execute``), Celery's signals sent at Celery's moments,
        and the run recorded in ``celery.worker.state`` (this process's worker's bookkeeping)."""
        received = worker_request.Request(request)
        worker_state.task_reserved(received)
        succeeded = False
        try:
            signals.task_received.send(sender=None, request=received)
            worker_state.task_accepted(received)
            value = self._run_received(job, item, request, args, kwargs, done=done, previous_value=previous_value)
            succeeded = True
            return value
        finally:
            stored = not (succeeded and request.retain_seconds)
            if not stored:  # its result is written after this run returns: counted then, as Celery counts it
                result_writer.after_success_recorded(received.id, partial(worker_state.task_stored, received))
            worker_state.task_ready(received, successful=succeeded, stored=stored)

    def _run_received(
        self, job: FunctionJob, item: Item, request: Context, args: list[Any], kwargs: dict[str, Any], *, done: bool, previous_value: Any
    ) -> Any:
        """The run itself, once the worker took the task (``_execute_request``)."""
        retry_count = item.get("retry_count")
        soft_seconds, timeout = request.timelimit[1], request.timelimit[0]
        task_id = str(request.id)
        started = self._tracks_started()
        if (started or retry_count is not None) and request.retain_seconds:
            # STARTED when tracked (Celery's meta: pid and hostname); else a state reported by the previous attempt is cleared
            fields = {results.CUSTOM_STATE_FIELD: ""}
            if started:
                meta = {"pid": os.getpid(), "hostname": request.hostname}
                fields = {results.CUSTOM_STATE_FIELD: STARTED, results.CUSTOM_META_FIELD: compact_json(meta)}
            result_writer.write_fields(job.jid, fields, retain_seconds=request.retain_seconds)
        if done:  # the function returned on an earlier run; only what follows it is left to push
            self._follow_up(job.jid, item, previous_value)
            self._succeeded(request, previous_value)
            return previous_value
        with _requesting(self, request):
            signals.task_prerun.send(sender=self, task_id=task_id, task=self, args=args, kwargs=kwargs)
            try:
                value = self._attempt(request, args, kwargs, soft_seconds=soft_seconds, async_timeout=timeout)
            except Ignore:
                # acknowledged; the record keeps what update_state wrote, nothing follows
                if request.retain_seconds:
                    result_writer.write_fields(job.jid, {results.IGNORED_FIELD: "1"}, retain_seconds=request.retain_seconds)
                self._postrun(request, args, kwargs, None, IGNORED)
                return None
            except Reject as rejected:
                if rejected.requeue:  # back to the queue at once; the engine files it through the retry set
                    self._postrun(request, args, kwargs, rejected, REJECTED)
                    raise Retry(exc=rejected, countdown=0) from rejected
                self._fail_dependents(item, rejected, request)
                self._store_exception(request, rejected)
                self._postrun(request, args, kwargs, rejected, FAILURE)
                raise  # the dead set, FAILURE with the reason
            except Retry as retry:
                self._retried(request, retry)
                self._store_exception(request, retry.exc if isinstance(retry.exc, BaseException) else retry)
                signals.task_retry.send(sender=self, request=request, reason=retry.exc or retry, einfo=ExceptionInfo(retry))
                self._postrun(request, args, kwargs, retry, RETRY)
                raise  # the engine files the job in the retry set (CeleryJob.sidekiq_retry_in)
            except BaseException as exc:  # final: the dead set; what depends on it will not run
                self._fail_dependents(item, exc, request)
                self._store_exception(request, exc)
                self._failed(request, exc)
                einfo = ExceptionInfo(exc)
                signals.task_failure.send(
                    sender=self, task_id=task_id, exception=exc, args=args, kwargs=kwargs, traceback=exc.__traceback__, einfo=einfo
                )
                self._postrun(request, args, kwargs, exc, FAILURE)
                raise
            value = _jsonable(value)
            self._follow_up(job.jid, item, value)
            self._succeeded(request, value)
            signals.task_success.send(sender=self, result=value)
            self._postrun(request, args, kwargs, value, SUCCESS)
        return value

    def _postrun(self, request: Context, args: Any, kwargs: Any, retval: Any, state: str) -> None:
        signals.task_postrun.send(sender=self, task_id=str(request.id), task=self, args=args, kwargs=kwargs, retval=retval, state=state)

    def _store_exception(self, request: Context, exc: BaseException) -> None:
        """Keep the exception's type, module and arguments (Celery's shape) in its result record, so
        ``AsyncResult`` rebuilds it with its arguments (exception_fields.py)."""
        if request.retain_seconds and request.id:
            result_writer.write_fields(str(request.id), exception_fields(exc), retain_seconds=request.retain_seconds)

    # --- what follows a task ---------------------------------------------------------------

    def _follow_up(self, jid: str, item: Item, value: Any) -> None:
        """Push the link callbacks and the next chain step with ``value``; record a chord part
        (``jobsapp.celery.follow_up``); ``Retry`` on a Redis error (the function is not run again)."""
        follow_up.succeeded(jid, item, value)

    @staticmethod
    def _fail_dependents(item: Item, exception: BaseException, request: Context | None = None) -> None:
        """Record the chain's later steps and the chord's callback FAILED; call the errbacks."""
        follow_up.failed(str(item.get("jid") or ""), item, exception, request=request)

    # --- Celery's built-in canvas calls ---------------------------------------------------------

    def map(self, it: Iterable[Any]) -> map_signature:
        """One task calling this one for each item, in order (``~add.map([...])``)."""
        return map_signature(self.s(), it)

    def starmap(self, it: Iterable[Any]) -> starmap_signature:
        """One task calling this one with each item as its arguments, in order."""
        return starmap_signature(self.s(), it)

    def chunks(self, it: Iterable[Any], n: int) -> chunks_signature:
        """The items in parts of ``n``: one ``starmap`` task per part, as a group."""
        return chunks_signature(self.s(), it, n)
