"""``AsyncResult`` and ``GroupResult``: Celery's result handles, read from the engine's result store.

A task's state comes from its ``jobsapp.results`` record: none, queued, scheduled or running is
PENDING (running is STARTED when the task tracks it, ``track_started``, as Celery's), retrying
RETRY, succeeded SUCCESS, failed FAILURE (REVOKED when it was revoked or expired). ``get()``
polls the record (10 ms after the first read, then twice as long each time, up to ``interval``
seconds) and raises the task's error
as Celery does: the exception class when it is a builtin or already loaded in this process,
else ``TaskFailure`` naming it (a result never makes this process import anything).
"""

from __future__ import annotations

import builtins
import json
import sys
import time
from collections.abc import Iterator
from typing import Any, Generic, Literal, TypeVar

from .. import keys, result_writer, results
from ..connection import get_redis
from ..payload import compact_json
from . import exception_fields
from .exceptions import CeleryError, ChordError, TaskFailure, TaskRevokedError, TimeoutError
from .trace import inside_worker_task
from .utils.serialization import rebuild_exception
from .values import RESULT_EXPIRES_SECONDS, _jsonable, decoded, register_result_handle

State = Literal["PENDING", "STARTED", "RETRY", "FAILURE", "SUCCESS"]

PENDING: State = "PENDING"
STARTED: State = "STARTED"
RETRY: State = "RETRY"
FAILURE: State = "FAILURE"
SUCCESS: State = "SUCCESS"
REVOKED = "REVOKED"
READY_STATES = frozenset({SUCCESS, FAILURE, REVOKED})

Returned = TypeVar("Returned", covariant=True)

_STATES: dict[str, str] = {
    results.QUEUED: PENDING,
    results.SCHEDULED: PENDING,
    results.RUNNING: PENDING,  # STARTED only when the task tracks it (it then writes that state itself)
    results.RETRYING: RETRY,
    results.SUCCEEDED: SUCCESS,
    results.FAILED: FAILURE,
}

#: The result record field naming the task that replaced this one (replacing.py), and how many
#: replacements a read follows.
REPLACED_FIELD = "celery_replaced_by"
_MAX_REPLACEMENTS = 100

#: ``get()``'s first pause between reads of the record; each next one doubles, up to ``interval``.
FIRST_POLL_SECONDS = 0.01

REVOKED_ERROR = f"{TaskRevokedError.__module__}.{TaskRevokedError.__qualname__}"
#: A record's reason when the task was cancelled while it ran (``revoke(terminate=True)``, ``jobsapp.api.cancel``).
CANCELLED_REASON = "cancelled"


def _stored_exception(task_id: str) -> dict[str, Any] | None:
    """The exception a task's record keeps in Celery's shape (exception_fields.py), if any."""
    return exception_fields.parse(get_redis().hget(keys.result(task_id), exception_fields.EXCEPTION_FIELD))


def _exception_for(record: results.JobResult) -> BaseException:
    """The task's exception, rebuilt with its arguments without importing anything."""
    if record.error_class == REVOKED_ERROR:
        return TaskRevokedError(record.error_message or "revoked")
    stored = _stored_exception(record.jid) if record.jid else None
    if stored is not None:
        error = rebuild_exception(stored["exc_module"], stored["exc_type"], stored.get("exc_message") or [], record.error_message)
        if isinstance(error, ChordError):
            dependency = exception_fields.parse(get_redis().hget(keys.result(record.jid), exception_fields.CHORD_DEPENDENCY_FIELD))
            if dependency is not None:
                cause = rebuild_exception(dependency["exc_module"], dependency["exc_type"], dependency.get("exc_message") or [])
                return chord_error(str(error), cause)
        return error
    path = record.error_class
    module_name, _, class_name = path.rpartition(".")
    candidate: Any = getattr(builtins, path, None) if not module_name else getattr(sys.modules.get(module_name), class_name, None)
    if isinstance(candidate, type) and issubclass(candidate, BaseException) and not issubclass(candidate, Exception):
        # SystemExit, KeyboardInterrupt...: raised in the caller they would stop it (a web process
        # would exit); a regular exception describes them instead
        return TaskFailure(path, record.error_message)
    if isinstance(candidate, type) and issubclass(candidate, BaseException):
        try:
            return candidate(record.error_message)
        except (TypeError, ValueError):  # a constructor that wants other arguments: the generic error below
            return TaskFailure(path, record.error_message)
    return TaskFailure(path, record.error_message)


_chord_error_classes: dict[type[BaseException], type[ChordError]] = {}


def chord_error(message: str, cause: BaseException) -> ChordError:
    """A ``ChordError`` that is also an instance of the failed header task's exception class (when
    the two classes can be combined), its ``__cause__`` that exception: Celery's canvas guide
    catches ``ChordError``, code written against Celery's Redis backend catches the header's own
    exception, and both work."""
    kind = type(cause)
    combined: type[ChordError] | None = _chord_error_classes.get(kind)
    if combined is None and isinstance(cause, Exception) and not isinstance(cause, ChordError):
        try:
            combined = type(
                f"ChordError[{kind.__qualname__}]", (ChordError, kind), {"__init__": ChordError.__init__, "__str__": ChordError.__str__}
            )
        except TypeError:  # classes whose instance layouts cannot be combined (some builtins)
            combined = None
        if combined is not None:
            _chord_error_classes[kind] = combined
    error = (combined or ChordError)(message)
    error.__cause__ = cause
    return error


def _reports_own_state(record: results.JobResult) -> bool:
    """The task reported a state of its own (``update_state``) that still stands: while it runs,
    or for good when it raised ``Ignore``."""
    return record.ignored or (bool(record.custom_state) and record.status == results.RUNNING)


class ResultBase:
    """Celery's common base of result handles."""

    parent: ResultBase | None = None


register_result_handle(ResultBase)


class IncompleteStream(CeleryError):
    """``collect()`` met a result that is not ready yet (and ``intermediate`` was not asked for)."""


class AsyncResult(ResultBase, Generic[Returned]):
    """A handle on one task's result, by task id (the job's jid)."""

    TimeoutError = TimeoutError

    def __init__(
        self, id: str, backend: Any = None, task_name: str | None = None, app: Any = None, parent: ResultBase | None = None
    ) -> None:
        self.id = id
        self.task_name = task_name
        self.parent = parent
        self._children: list[ResultBase] | None = None
        #: Set by ``apply_async`` for a task whose result is not stored: ``get()`` returns None at once.
        self.ignored = False

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):  # Celery's: a result equals its id
            return other == self.id
        return isinstance(other, AsyncResult) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def task_id(self) -> str:
        return self.id

    @property
    def backend(self) -> ResultBackend:
        """The result store, as Celery's ``result.backend``."""
        return ResultBackend()

    def _record(self) -> results.JobResult | None:
        """The task's result record; for a task replaced by others (``Task.replace``), the record
        of the task whose result stands for it."""
        record = results.get(self.id)
        for _ in range(_MAX_REPLACEMENTS):
            if record is None or not record.ignored:
                return record
            replaced_by = get_redis().hget(keys.result(record.jid or self.id), REPLACED_FIELD)
            if not replaced_by:
                return record
            record = results.get(replaced_by.decode() if isinstance(replaced_by, bytes) else str(replaced_by))
        return record

    @property
    def state(self) -> State:
        record = self._record()
        if record is None:
            return PENDING
        if _reports_own_state(record):
            return record.custom_state or PENDING  # type: ignore[return-value]  # a state of the task's own (update_state)
        if record.failed and (record.error_class == REVOKED_ERROR or record.reason == CANCELLED_REASON):
            return REVOKED  # type: ignore[return-value]  # Celery's REVOKED, absent from celery-types' Literal
        return _STATES.get(record.status, PENDING)  # type: ignore[return-value]

    status = state

    def ready(self) -> bool:
        return self.state in READY_STATES

    def successful(self) -> bool:
        return self.state == SUCCESS

    def failed(self) -> bool:
        return self.state == FAILURE

    @property
    def result(self) -> Returned | BaseException:
        """The return value once SUCCESS, the exception once FAILURE (or while RETRY), else None."""
        record = self._record()
        if record is None:
            return None  # type: ignore[return-value]
        if _reports_own_state(record):
            return decoded(record.custom_meta)  # update_state's meta
        if record.succeeded:
            return decoded(record.value)
        if record.error_class and record.status in (results.FAILED, results.RETRYING):
            return _exception_for(record)
        return None  # type: ignore[return-value]

    info = result

    @property
    def traceback(self) -> str | None:
        record = self._record()
        return record.error_traceback or None if record is not None else None

    def get(self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5, **options: Any) -> Returned:
        """Wait for the task to finish and return its value; raise its error (``propagate``) or
        ``TimeoutError`` after ``timeout`` seconds. Inside a task a worker runs, RuntimeError
        (Celery's rule: it would block the worker's thread) unless ``disable_sync_subtasks=False``."""
        if options.get("on_message") is not None:
            raise TypeError("AsyncResult.get(on_message=...) is not supported: read .state and .info instead")
        if options.get("disable_sync_subtasks", True) and inside_worker_task():
            raise RuntimeError(
                "Never call result.get() within a task! See "
                "https://docs.celeryq.dev/en/latest/userguide/tasks.html#avoid-launching-synchronous-subtasks"
            )
        if self.ignored:
            return None  # type: ignore[return-value]  # Celery's get() of an ignored result
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.0  # the polls start fast and slow down to ``interval``: a quick task is seen at once
        while True:
            record = self._record()
            if record is not None and record.ignored:  # Ignore: only a SUCCESS it stored itself is an outcome
                if record.custom_state == SUCCESS:
                    return decoded(record.custom_meta)
            elif record is not None and record.ready:
                if record.succeeded:
                    return decoded(record.value)
                error = _exception_for(record)
                if propagate:
                    raise error
                return error  # type: ignore[return-value]
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"The operation timed out: task {self.id} is not ready after {timeout:g} s")
            pause = min(interval, pause * 2) if pause else min(interval, FIRST_POLL_SECONDS)
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))

    wait = get

    def forget(self) -> None:
        """Delete the stored result now."""
        results.forget(self.id)

    def revoke(
        self, connection: Any = None, terminate: bool = False, signal: str | None = None, wait: bool = False, timeout: float | None = None
    ) -> None:
        """Remove the task if it has not started yet; with ``terminate``, stop it if it runs (see
        ``jobsapp.celery.revoke``)."""
        from .control import revoke

        revoke(self.id, terminate=terminate, signal=signal)

    def revoke_by_stamped_headers(
        self,
        headers: dict[str, Any] | list[str],
        connection: Any = None,
        terminate: bool = False,
        signal: str | None = None,
        wait: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Revoke, fleet-wide, every task stamped with one of ``headers`` (``app.control.revoke_by_stamped_headers``)."""
        from .control import revoke_by_stamped_headers

        revoke_by_stamped_headers(headers, terminate=terminate, signal=signal)

    def as_list(self) -> list[AsyncResult[Any]]:
        return [self]

    def as_tuple(self) -> tuple[Any, Any]:
        """``((id, parent's tuple), None)``: Celery's serializable form of a result and its parents."""
        parent = self.parent
        return (self.id, parent.as_tuple() if parent is not None and hasattr(parent, "as_tuple") else None), None

    @property
    def children(self) -> list[Any] | None:
        """The results of the callbacks linked to this task when it was applied from this process
        (None for a handle made from an id: children are not stored with the result)."""
        return self._children

    def collect(self, intermediate: bool = False, **options: Any) -> Iterator[tuple[ResultBase, Any]]:
        """``(result, value)`` for this result, then its children, depth first (Celery's graph walk);
        ``IncompleteStream`` at a result not ready yet, unless ``intermediate``."""
        pending: list[Any] = [self]
        while pending:
            node = pending.pop(0)
            if not node.ready():
                if not intermediate:
                    raise IncompleteStream(f"result {node.id} is not ready")
                continue
            yield node, node.get(**options)
            pending[:0] = list(node.children or [])


class ResultSet(ResultBase):
    """Several results handled as one (Celery's ``ResultSet``): ``get()`` returns their values in order."""

    def __init__(self, results: list[Any] | None = None, app: Any = None, ready_barrier: Any = None, **kwargs: Any) -> None:
        self.results: list[Any] = list(results or [])

    def __iter__(self) -> Iterator[Any]:
        return iter(self.results)

    @property
    def backend(self) -> ResultBackend:
        """The result store, as Celery's ``result.backend``."""
        return ResultBackend()

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> Any:
        return self.results[index]

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: [{', '.join(each.id for each in self.results)}]>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResultSet) and other.results == self.results

    def __hash__(self) -> int:
        return hash(tuple(each.id for each in self.results))

    @property
    def state(self) -> State:
        states = [each.state for each in self.results]
        if any(state == FAILURE for state in states):
            return FAILURE
        if states and all(state == SUCCESS for state in states):
            return SUCCESS
        return STARTED if any(state != PENDING for state in states) else PENDING

    @property
    def status(self) -> State:
        return self.state

    def ready(self) -> bool:
        return all(each.ready() for each in self.results)

    def successful(self) -> bool:
        return all(each.successful() for each in self.results)

    def failed(self) -> bool:
        return any(each.failed() for each in self.results)

    def completed_count(self) -> int:
        """How many tasks succeeded (Celery counts "completed" as successful)."""
        return sum(1 for each in self.results if each.successful())

    def waiting(self) -> bool:
        """Whether any task is not ready yet."""
        return not self.ready()

    def supports_native_join(self) -> bool:
        return True

    def add(self, result: Any) -> None:
        """Add ``result`` to the set (once)."""
        if result not in self.results:
            self.results.append(result)

    def remove(self, result: Any) -> None:
        """Remove ``result`` (KeyError when it is not in the set, as Celery's)."""
        if result not in self.results:
            raise KeyError(result)
        self.results.remove(result)

    def discard(self, result: Any) -> None:
        """Remove ``result`` from the set, if there."""
        if result in self.results:
            self.results.remove(result)

    def update(self, results: Any) -> None:
        """Add each of ``results`` not already in the set."""
        for each in results:
            self.add(each)

    def clear(self) -> None:
        self.results.clear()

    def forget(self) -> None:
        for each in self.results:
            each.forget()

    def revoke(
        self, connection: Any = None, terminate: bool = False, signal: str | None = None, wait: bool = False, timeout: float | None = None
    ) -> None:
        for each in self.results:
            each.revoke(terminate=terminate, signal=signal)

    def iterate(self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5) -> Iterator[Any]:
        """Each task's value, in order, as it becomes ready."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for each in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            yield each.get(timeout=remaining, propagate=propagate, interval=interval)

    def get(
        self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5, callback: Any = None, **options: Any
    ) -> list[Any]:
        """Every task's value, in order; with ``propagate``, the first error to arrive is raised as
        soon as it does (Celery's native join), not after the tasks before it end;
        ``callback(task_id, value)`` for each."""
        if options.get("disable_sync_subtasks", True) and inside_worker_task():
            raise RuntimeError(
                "Never call result.get() within a task! See "
                "https://docs.celeryq.dev/en/latest/userguide/tasks.html#avoid-launching-synchronous-subtasks"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        if propagate and len(self.results) > 1:
            self._wait_raising_first_error(deadline, interval)
        values = []
        for each in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            value = each.get(timeout=remaining, propagate=propagate, interval=interval, **options)
            if callback is not None:
                callback(each.id, value)
            else:
                values.append(value)
        return values if callback is None else None  # type: ignore[return-value]

    join = get
    join_native = get

    def _wait_raising_first_error(self, deadline: float | None, interval: float) -> None:
        """Wait until every task is ready (or the deadline passes), raising the error of the first
        one seen failed. Each poll reads the tasks not ready yet, fast at first, then every ``interval``."""
        pending = [each for each in self.results if not getattr(each, "ignored", False)]
        pause = 0.0
        while pending:
            waiting = []
            for each in pending:
                if isinstance(each, ResultSet):
                    ready, succeeded = each.ready(), each.successful()
                else:
                    state = each.state
                    ready, succeeded = state in READY_STATES, state == SUCCESS
                if ready and not succeeded:
                    each.get(propagate=True, disable_sync_subtasks=False)  # raises its error
                if not ready:
                    waiting.append(each)
            pending = waiting
            if not pending or (deadline is not None and time.monotonic() >= deadline):
                return  # the values are read in order next (TimeoutError there, past the deadline)
            pause = min(interval, pause * 2) if pause else min(interval, FIRST_POLL_SECONDS)
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))

    @property
    def result(self) -> list[Any]:
        return [each.result for each in self.results]

    def as_list(self) -> list[Any]:
        return list(self.results)


class GroupResult(ResultSet, AsyncResult[list[Any]]):
    """The results of a group, in the group's order; ``get()`` returns their values as a list."""

    def __init__(self, id: str | None = None, results: list[AsyncResult[Any]] | None = None, **kwargs: Any) -> None:
        AsyncResult.__init__(
            self, id or "", **{name: value for name, value in kwargs.items() if name in ("backend", "task_name", "app", "parent")}
        )
        self.results = list(results or [])

    @property
    def children(self) -> list[AsyncResult[Any]]:  # a group's children are its tasks
        return self.results

    def as_tuple(self) -> tuple[Any, Any]:
        """``((group id, parent's tuple), [each result's tuple])``, as Celery's ``GroupResult.as_tuple``."""
        parent = self.parent
        return (self.id, parent.as_tuple() if parent is not None and hasattr(parent, "as_tuple") else None), [
            each.as_tuple() for each in self.results
        ]

    def save(self, backend: Any = None) -> GroupResult:
        """Keep this group's ids (its ``as_tuple()``) for ``restore(id)``, as long as results are kept."""
        get_redis().set(keys.celery_group(self.id), compact_json(_jsonable(self.as_tuple())), ex=RESULT_EXPIRES_SECONDS)
        return self

    @classmethod
    def restore(cls, id: str, backend: Any = None, app: Any = None) -> GroupResult | None:
        """The group saved under ``id`` (``save()``), or None."""
        raw = get_redis().get(keys.celery_group(id))
        if raw is None:
            return None
        restored = result_from_tuple(json.loads(raw))
        return restored if isinstance(restored, GroupResult) else None

    def delete(self, backend: Any = None) -> None:
        """Forget what ``save()`` kept (the tasks' results stay)."""
        get_redis().delete(keys.celery_group(self.id))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GroupResult) and other.id == self.id and other.results == self.results

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<GroupResult: {self.id} [{', '.join(each.id for each in self.results)}]>"


def result_from_tuple(value: Any) -> Any:
    """A result handle from its ``as_tuple()`` form (lists after JSON), parents included, as Celery's."""
    if not value:
        return None
    (result_id, parent), children = value
    parent_result = result_from_tuple(parent) if parent else None
    if children is not None:
        return GroupResult(result_id, [result_from_tuple(each) for each in children], parent=parent_result)
    return AsyncResult(result_id, parent=parent_result)


class EagerResult(AsyncResult[Returned]):
    """The result of ``Task.apply``: the task already ran in this thread; nothing is read from Redis."""

    def __init__(self, id: str, ret_value: Any, state: str, traceback: str | None = None, name: str | None = None) -> None:
        super().__init__(id, task_name=name)
        self._value = ret_value
        self._state = state
        self._traceback = traceback

    def __repr__(self) -> str:
        return f"<EagerResult: {self.id}>"

    @property
    def state(self) -> State:
        return self._state  # type: ignore[return-value]  # any state: a task's own ones too

    status = state

    @property
    def result(self) -> Returned | BaseException:
        return self._value

    info = result

    @property
    def traceback(self) -> str | None:
        return self._traceback

    def ready(self) -> bool:
        return True

    def get(self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5, **options: Any) -> Returned:
        """The value; the task's exception is raised (``propagate``) or returned."""
        if self._state in (FAILURE, REVOKED) and isinstance(self._value, BaseException):
            if propagate:
                raise self._value
            return self._value  # type: ignore[return-value]
        return self._value

    wait = get

    def forget(self) -> None:
        """Nothing is stored for an eager result."""

    def revoke(
        self, connection: Any = None, terminate: bool = False, signal: str | None = None, wait: bool = False, timeout: float | None = None
    ) -> None:
        self._state = REVOKED


class ResultBackend:
    """``app.backend`` / ``result.backend``: the engine's result store, read as Celery's backends read.

    ``get_task_meta(task_id)`` gives Celery's meta dict (``task_id``, ``status``, ``result``,
    ``traceback``, ``children``, ``date_done``); chords are always allowed (they complete in one
    Lua script, not with a backend's counters)."""

    def ensure_chords_allowed(self) -> None:
        """Chords work on the result store: nothing to refuse."""

    def get_task_meta(self, task_id: str, cache: bool = True) -> dict[str, Any]:
        result: AsyncResult[Any] = AsyncResult(task_id)
        record = result._record()
        state = result.state
        value = None if state in (PENDING, STARTED) and (record is None or not record.custom_state) else result.result
        return {
            "task_id": task_id,
            "status": state,
            "result": value,
            "traceback": result.traceback,
            "children": [],
            "date_done": None if record is None or not record.ready else record.finished_at,
        }

    def store_result(self, task_id: str, result: Any, state: str, traceback: Any = None, request: Any = None, **kwargs: Any) -> Any:
        """Record a state for a task by hand, as Celery's ``backend.store_result``: SUCCESS with its
        value, FAILURE with its exception, any other state (STARTED, or one of the task's own) as
        reported while it runs."""
        fields: dict[str, str] = {}
        if state == SUCCESS:
            fields = {"status": results.SUCCEEDED, "value": compact_json(_jsonable(result)), "finished_at": repr(time.time())}
        elif state in (FAILURE, REVOKED) and isinstance(result, BaseException):
            kind = type(result)
            fields = {
                "status": results.FAILED,
                "error_class": kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}",
                "error_message": str(result),
                "finished_at": repr(time.time()),
                **exception_fields.exception_fields(result),
            }
        else:  # STARTED as a tracked task reports it (its meta kept), or a state of the task's own
            fields = {
                "status": results.RUNNING,
                results.CUSTOM_STATE_FIELD: state,
                results.CUSTOM_META_FIELD: compact_json(_jsonable(result)),
            }
        result_writer.write_fields(task_id, {"jid": task_id, **fields}, retain_seconds=RESULT_EXPIRES_SECONDS, wait=True)
        return result

    def mark_as_revoked(self, task_id: str, reason: str = "", request: Any = None, **kwargs: Any) -> None:
        from .control import mark_revoked

        mark_revoked(task_id, message=reason or "revoked")

    def get_state(self, task_id: str) -> str:
        return AsyncResult(task_id).state

    def get_result(self, task_id: str) -> Any:
        return AsyncResult(task_id).result

    def forget(self, task_id: str) -> None:
        results.forget(task_id)
