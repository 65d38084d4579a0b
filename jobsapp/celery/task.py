"""Celery-style tasks on the engine: ``shared_task``/``task`` and the ``Task`` they return.

Producing side (any thread): ``delay``/``apply_async`` push a Sidekiq item through
``jobsapp.client`` under the task's name (``module.function`` by default, as Celery), with
``retain`` set so ``AsyncResult`` can read the outcome (unless ``ignore_result``); ``countdown``
and ``eta`` go to the schedule set; ``task_id`` becomes the jid.

Consuming side (a processor thread): the task's ``CeleryJob`` sets ``self.request`` (id, retries,
args, kwargs...), runs the function (given the task first with ``bind=True``), and on success
pushes what follows it (the next step of a chain, a chord's callback once every header task has
succeeded: a HASH per chord, ``keys.chord``, filled with HSETNX so exactly one worker sees it
complete). Failures follow Celery's rules through the engine's retry machinery:

- ``self.retry(...)`` or an ``autoretry_for`` exception raises ``Retry``: the job goes to the
  retry set and runs again after ``countdown`` seconds (``default_retry_delay``, or the backoff),
  same jid, ``request.retries`` one higher; past ``max_retries`` the task fails with ``exc`` (or
  ``MaxRetriesExceededError``);
- any other exception fails the task at once: the dead set (an operator may retry it by hand),
  FAILURE in its result, and the steps of its chain and its chord's callback are marked failed
  with its error (``AsyncResult.get()`` of a chain's last task raises it, as Celery's does).
"""

from __future__ import annotations

import datetime as dt
import inspect
import random
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

from .. import aio, keys, result_writer, results, timeouts
from ..connection import get_redis
from ..functions import FunctionJob, dotted_path, job_class_for
from ..payload import Item, compact_json, now
from .exceptions import ChordError, MaxRetriesExceededError, Retry, TaskRevokedError
from .options import check_options
from .result import AsyncResult
from .result import AsyncResult as _AsyncResult  # the class, where a method named AsyncResult shadows it

if TYPE_CHECKING:
    from .canvas import Signature

Params = ParamSpec("Params")
Returned = TypeVar("Returned", covariant=True)

#: How long results are kept (Celery's ``result_expires`` default: one day).
RESULT_EXPIRES_SECONDS = 24 * 3600
#: The engine's retry limit for Celery jobs: the task itself enforces ``max_retries``.
ENGINE_RETRY_LIMIT = 10_000

#: Payload extras.
CHAIN_KEY = "celery_chain"  # the steps to push after this one succeeds (signature dicts)
CHORD_KEY = "celery_chord"  # {"id", "header": [jids], "body": signature dict}
EXPIRES_KEY = "celery_expires_at"  # epoch seconds after which the task is revoked unrun
HEADERS_KEY = "celery_headers"

_tasks_lock = threading.Lock()
_tasks: dict[str, Task[Any, Any]] = {}


class NotRegistered(KeyError):
    """A signature names a task this process has not defined: nothing is pushed."""


def lookup(name: str) -> Task[Any, Any]:
    """The task defined under ``name`` in this process."""
    task = _tasks.get(name)
    if task is None:
        raise NotRegistered(f"no Celery-style task named {name!r} is defined in this process")
    return task


def _jsonable(value: Any) -> Any:
    """Celery's JSON serializer's view: tuples become lists (anything else is checked at push)."""
    if isinstance(value, tuple | list):
        return [_jsonable(element) for element in value]
    if isinstance(value, dict):
        return {key: _jsonable(element) for key, element in value.items()}
    return value


def _epoch(when: float | dt.datetime) -> float:
    if isinstance(when, dt.datetime):
        return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()
    return float(when)


class Context:
    """``self.request``: what Celery tells a running task about itself."""

    def __init__(self, **fields: Any) -> None:
        self.id: str | None = None
        self.retries = 0
        self.args: list[Any] = []
        self.kwargs: dict[str, Any] = {}
        self.called_directly = True
        self.is_eager = False
        self.eta: float | None = None
        self.expires: float | None = None
        self.headers: dict[str, Any] | None = None
        self.delivery_info: dict[str, Any] = {}
        self.hostname: str | None = None
        self.task: str | None = None
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"<Context {self.__dict__!r}>"


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
    """A Celery-style task: call it, ``delay`` it, ``apply_async`` it, sign it."""

    MaxRetriesExceededError = MaxRetriesExceededError

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        bind: bool = False,
        queue: str | None = None,
        max_retries: int | None = 3,
        default_retry_delay: int = 180,
        autoretry_for: Sequence[type[BaseException]] = (),
        dont_autoretry_for: Sequence[type[BaseException]] = (),
        retry_kwargs: dict[str, Any] | None = None,
        retry_backoff: bool | int = False,
        retry_backoff_max: int = 600,
        retry_jitter: bool = True,
        ignore_result: bool = False,
        expires: float | dt.datetime | None = None,
    ) -> None:
        self.function = function
        self.name = name or dotted_path(function)
        self.bind = bind
        if bind and inspect.iscoroutinefunction(function):
            # self.request is per thread, and the coroutine runs on the worker's event loop thread
            raise TypeError(
                f"{self.name}: bind=True is not supported on an async def task (self.request would not be this call's); "
                "use a plain def task to bind, or drop bind"
            )
        self.queue = queue
        self.max_retries = max_retries
        self.default_retry_delay = default_retry_delay
        self.autoretry_for = tuple(autoretry_for)
        self.dont_autoretry_for = tuple(dont_autoretry_for)
        self.retry_kwargs = dict(retry_kwargs or {})
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.retry_jitter = retry_jitter
        self.ignore_result = ignore_result
        self.expires = expires
        self.rng = random.Random()
        self._local = threading.local()
        self.__doc__ = function.__doc__
        self.__name__ = getattr(function, "__name__", self.name)
        self.__module__ = function.__module__
        options: dict[str, Any] = {"retry": ENGINE_RETRY_LIMIT}
        if queue:
            options["queue"] = queue
        self.job_class = job_class_for(
            function, base=CeleryJob, name=self.name if name else None, attributes={"task": self}, options=options
        )
        with _tasks_lock:
            _tasks[self.name] = self

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

    # --- enqueueing ----------------------------------------------------------------------

    def delay(self, *args: Params.args, **kwargs: Params.kwargs) -> _AsyncResult[Returned]:
        """``apply_async(args, kwargs)``."""
        return self.apply_async(args, kwargs)

    def delay_on_commit(self, *args: Params.args, **kwargs: Params.kwargs) -> None:
        """``delay`` once the current database transaction commits (at once outside one)."""
        from django.db import transaction

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
        **options: Any,
    ) -> _AsyncResult[Returned]:
        """Push the task; returns its ``AsyncResult`` (its id is the job's jid)."""
        extra = {name: value for name, value in (("producer", producer), ("shadow", shadow)) if value is not None}
        check_options({**extra, **options}, where=f"{self.name}.apply_async()")
        if link_error is not None:
            from .options import warn_unsupported

            warn_unsupported("link_error", "error callbacks are not run; the failure is in the result and the dead set")
        steps: list[dict[str, Any]] = []
        if link is not None:
            steps = [dict(each) for each in (link if isinstance(link, list) else [link])]
        jid = self._push(
            list(args or ()),
            dict(kwargs or {}),
            task_id=task_id,
            countdown=countdown,
            eta=eta,
            expires=expires,
            queue=queue,
            headers=headers,
            ignore_result=ignore_result,
            chain=steps,
        )
        return AsyncResult(jid, task_name=self.name)

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
    ) -> str:
        options: dict[str, Any] = {"on_commit": False}  # Celery pushes at once; delay_on_commit waits
        if task_id:
            options["jid"] = task_id
        if queue:
            options["queue"] = queue
        keep = not (self.ignore_result if ignore_result is None else ignore_result)
        if keep or chord is not None or chain:
            options["retain"] = RESULT_EXPIRES_SECONDS
        expires = self.expires if expires is None else expires
        if expires is not None:
            options[EXPIRES_KEY] = _epoch(expires) if isinstance(expires, dt.datetime) else now() + float(expires)
        if headers:
            options[HEADERS_KEY] = headers
        if chain:
            options[CHAIN_KEY] = chain
        if chord is not None:
            options[CHORD_KEY] = chord
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
        return jid

    # --- signatures ------------------------------------------------------------------------

    def signature(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, *, immutable: bool = False, **options: Any
    ) -> Signature[Returned]:
        from .canvas import Signature

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

    # --- inside a worker -------------------------------------------------------------------

    @property
    def request(self) -> Context:
        """The running call's context; a "called directly" one outside a worker."""
        stack: list[Context] = getattr(self._local, "stack", [])
        return stack[-1] if stack else Context(task=self.name)

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
        ``MaxRetriesExceededError``) when no retries are left. Changed args cannot be given."""
        if args is not None or kwargs is not None:
            raise TypeError("jobsapp.celery retries a task with the arguments it was called with; args/kwargs cannot change")
        check_options(options, where=f"{self.name}.retry()")
        request = self.request
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

    def _execute(self, job: FunctionJob, args: list[Any], kwargs: dict[str, Any]) -> Any:
        item = job.item
        expires_at = item.get(EXPIRES_KEY)
        if isinstance(expires_at, (int, float)) and now() > expires_at:
            error = TaskRevokedError(f"{self.name}[{job.jid}] expired before it started")
            self._fail_dependents(item, error)
            raise error
        retry_count = item.get("retry_count")
        request = Context(
            id=job.jid,
            retries=retry_count + 1 if type(retry_count) is int else 0,
            args=args,
            kwargs=kwargs,
            called_directly=False,
            expires=expires_at,
            headers=item.get(HEADERS_KEY),
            delivery_info={"queue": job.queue, "routing_key": job.queue},
            hostname=results.worker_name(),
            task=self.name,
        )
        stack = self._local.__dict__.setdefault("stack", [])
        stack.append(request)
        try:
            try:
                value = self.run(*args, **kwargs)
                if inspect.iscoroutine(value):  # an async def task: awaited on this worker's loop (jobsapp.aio)
                    value = aio.run(value, timeout_seconds=timeouts.timeout_seconds(item))
            except Retry:
                raise
            except BaseException as exc:  # autoretry turns it into Retry (or re-raises it when no retries are left)
                if self._autoretries(exc):
                    self.retry(exc=exc, countdown=self._backoff_seconds(request.retries), max_retries=self.retry_kwargs.get("max_retries"))
                raise
        except Retry:
            raise  # the engine files the job in the retry set (CeleryJob.sidekiq_retry_in)
        except BaseException as exc:  # final: the dead set; what depends on it will not run
            self._fail_dependents(item, exc)
            raise
        finally:
            stack.pop()
        value = _jsonable(value)
        self._follow_up(job.jid, item, value)
        return value

    # --- what follows a task ---------------------------------------------------------------

    def _follow_up(self, jid: str, item: Item, value: Any) -> None:
        """Push the next chain step with ``value``, or a chord's callback when this was the last
        header task to succeed."""
        chain = item.get(CHAIN_KEY)
        if isinstance(chain, list) and chain:
            from .canvas import push_step

            push_step(chain[0], [value], rest=chain[1:])
        chord = item.get(CHORD_KEY)
        if isinstance(chord, dict):
            _chord_part_done(chord, jid, value)

    @staticmethod
    def _fail_dependents(item: Item, exception: BaseException) -> None:
        kind = type(exception)
        error_class = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        message = str(exception)
        chain = item.get(CHAIN_KEY)
        for step in chain if isinstance(chain, list) else []:
            step_id = step.get("options", {}).get("task_id") if isinstance(step, dict) else None
            if step_id:
                result_writer.write_outcome(
                    step_id,
                    {"status": results.FAILED, "reason": "dependency_failed", "error_class": error_class, "error_message": message},
                    retain_seconds=RESULT_EXPIRES_SECONDS,
                )
        chord = item.get(CHORD_KEY)
        if isinstance(chord, dict):
            body_id = chord.get("body", {}).get("options", {}).get("task_id")
            if body_id:
                result_writer.write_outcome(
                    body_id,
                    {
                        "status": results.FAILED,
                        "reason": "dependency_failed",
                        "error_class": f"{ChordError.__module__}.{ChordError.__qualname__}",
                        "error_message": f"Dependency {item.get('jid')} raised {error_class}({message!r})",
                    },
                    retain_seconds=RESULT_EXPIRES_SECONDS,
                )


def _chord_part_done(chord: dict[str, Any], jid: str, value: Any) -> None:
    """Store this header task's value; the worker whose store completes the set pushes the callback."""
    chord_id = str(chord.get("id", ""))
    header = chord.get("header")
    if not chord_id or not isinstance(header, list):
        return
    key = keys.chord(chord_id)
    pipe = get_redis().pipeline(transaction=True)
    pipe.hsetnx(key, jid, compact_json(value))
    pipe.hlen(key)
    pipe.expire(key, RESULT_EXPIRES_SECONDS)
    added, count, _ = pipe.execute()
    if not added or count < len(header):
        return  # a rerun of a part already counted, or parts still to come
    stored = get_redis().hgetall(key)
    values = [_decode_json(stored.get(part.encode() if isinstance(part, str) else part)) for part in header]
    from .canvas import push_step

    push_step(chord["body"], [values], rest=[])


def _decode_json(raw: bytes | str | None) -> Any:
    import json

    return json.loads(raw) if raw is not None else None


# --- decorators ------------------------------------------------------------------------------

_TASK_OPTIONS = (
    "name",
    "bind",
    "queue",
    "max_retries",
    "default_retry_delay",
    "autoretry_for",
    "dont_autoretry_for",
    "retry_kwargs",
    "retry_backoff",
    "retry_backoff_max",
    "retry_jitter",
    "ignore_result",
    "expires",
)


@overload
def shared_task(fun: Callable[Params, Returned], /) -> Task[Params, Returned]: ...
@overload
def shared_task(
    *,
    name: str = ...,
    bind: Literal[False] = ...,
    queue: str = ...,
    max_retries: int | None = ...,
    default_retry_delay: int = ...,
    autoretry_for: Sequence[type[BaseException]] = ...,
    dont_autoretry_for: Sequence[type[BaseException]] = ...,
    retry_kwargs: dict[str, Any] = ...,
    retry_backoff: bool | int = ...,
    retry_backoff_max: int = ...,
    retry_jitter: bool = ...,
    ignore_result: bool = ...,
    expires: float | dt.datetime | None = ...,
    **options: Any,
) -> Callable[[Callable[Params, Returned]], Task[Params, Returned]]: ...
@overload
def shared_task(
    *,
    name: str = ...,
    bind: Literal[True],
    queue: str = ...,
    max_retries: int | None = ...,
    default_retry_delay: int = ...,
    autoretry_for: Sequence[type[BaseException]] = ...,
    dont_autoretry_for: Sequence[type[BaseException]] = ...,
    retry_kwargs: dict[str, Any] = ...,
    retry_backoff: bool | int = ...,
    retry_backoff_max: int = ...,
    retry_jitter: bool = ...,
    ignore_result: bool = ...,
    expires: float | dt.datetime | None = ...,
    **options: Any,
) -> Callable[[Callable[Concatenate[Task[Params, Returned], Params], Returned]], Task[Params, Returned]]: ...
def shared_task(fun: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Decorator: make a module-level function a Celery-style task (``@shared_task`` or
    ``@shared_task(bind=True, queue=..., max_retries=..., autoretry_for=(...), ...)``).

    Put it in an app's ``tasks.py`` (autodiscovered). Celery options this layer cannot honour
    (``time_limit``, ``rate_limit``, ``acks_late``, ...) are accepted with a one-time warning.
    """
    task_options = {name: options.pop(name) for name in _TASK_OPTIONS if name in options}
    check_options(options, where="shared_task()")

    def decorate(function: Callable[..., Any]) -> Task[Any, Any]:
        return Task(function, **task_options)

    return decorate(fun) if fun is not None else decorate


task = shared_task
