"""``AsyncResult`` and ``GroupResult``: Celery's result handles, read from the engine's result store.

A task's state comes from its ``jobsapp.results`` record: none, queued or scheduled is PENDING,
running STARTED, retrying RETRY, succeeded SUCCESS, failed FAILURE (REVOKED when it was revoked
or expired). ``get()`` polls the record (every ``interval`` seconds) and raises the task's error
as Celery does: the exception class when it is a builtin or already loaded in this process,
else ``TaskFailure`` naming it (a result never makes this process import anything).
"""

from __future__ import annotations

import builtins
import sys
import time
from collections.abc import Iterator
from typing import Any, Generic, Literal, TypeVar

from .. import results
from .exceptions import CeleryError, TaskFailure, TaskRevokedError, TimeoutError
from .trace import inside_worker_task

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
    results.RUNNING: STARTED,
    results.RETRYING: RETRY,
    results.SUCCEEDED: SUCCESS,
    results.FAILED: FAILURE,
}

REVOKED_ERROR = f"{TaskRevokedError.__module__}.{TaskRevokedError.__qualname__}"
#: A record's reason when the task was cancelled while it ran (``revoke(terminate=True)``, ``jobsapp.api.cancel``).
CANCELLED_REASON = "cancelled"


def _exception_for(record: results.JobResult) -> BaseException:
    """The task's exception, rebuilt without importing anything."""
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


def _reports_own_state(record: results.JobResult) -> bool:
    """The task reported a state of its own (``update_state``) that still stands: while it runs,
    or for good when it raised ``Ignore``."""
    return record.ignored or (bool(record.custom_state) and record.status == results.RUNNING)


class ResultBase:
    """Celery's common base of result handles."""

    parent: ResultBase | None = None


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
        return isinstance(other, AsyncResult) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def task_id(self) -> str:
        return self.id

    def _record(self) -> results.JobResult | None:
        return results.get(self.id)

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
            return record.custom_meta  # update_state's meta
        if record.succeeded:
            return record.value
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
        while True:
            record = self._record()
            if record is not None and record.ignored:  # Ignore: only a SUCCESS it stored itself is an outcome
                if record.custom_state == SUCCESS:
                    return record.custom_meta
            elif record is not None and record.ready:
                if record.succeeded:
                    return record.value
                error = _exception_for(record)
                if propagate:
                    raise error
                return error  # type: ignore[return-value]
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"The operation timed out: task {self.id} is not ready after {timeout:g} s")
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))

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

    def as_list(self) -> list[AsyncResult[Any]]:
        return [self]

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


class GroupResult(AsyncResult[list[Any]]):
    """The results of a group, in the group's order; ``get()`` returns their values as a list."""

    def __init__(self, id: str | None = None, results: list[AsyncResult[Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(id or "", **kwargs)
        self.results: list[AsyncResult[Any]] = list(results or [])

    def __iter__(self) -> Iterator[AsyncResult[Any]]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> AsyncResult[Any]:
        return self.results[index]

    @property
    def children(self) -> list[AsyncResult[Any]]:  # a group's children are its tasks
        return self.results

    @property
    def state(self) -> State:
        states = [each.state for each in self.results]
        if any(state == FAILURE for state in states):
            return FAILURE
        if states and all(state == SUCCESS for state in states):
            return SUCCESS
        return STARTED if any(state != PENDING for state in states) else PENDING

    status = state

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
        return False

    def add(self, result: AsyncResult[Any]) -> None:
        """Add ``result`` to the set (once)."""
        if result not in self.results:
            self.results.append(result)

    def discard(self, result: AsyncResult[Any]) -> None:
        """Remove ``result`` from the set, if there."""
        if result in self.results:
            self.results.remove(result)

    def update(self, results: list[AsyncResult[Any]]) -> None:
        """Add each of ``results`` not already in the set."""
        for each in results:
            self.add(each)

    def clear(self) -> None:
        self.results.clear()

    def iterate(self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5) -> Iterator[Any]:
        """Each task's value, in order, as it becomes ready."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for each in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            yield each.get(timeout=remaining, propagate=propagate, interval=interval)

    def get(self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5, **options: Any) -> list[Any]:
        """Every task's value, in order (the first error raised with ``propagate``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for each in self.results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            values.append(each.get(timeout=remaining, propagate=propagate, interval=interval))
        return values

    join = get
    join_native = get

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GroupResult) and other.id == self.id and other.results == self.results

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<GroupResult: {self.id} [{', '.join(each.id for each in self.results)}]>"

    @property
    def result(self) -> list[Any]:
        return [each.result for each in self.results]

    def forget(self) -> None:
        for each in self.results:
            each.forget()

    def revoke(
        self, connection: Any = None, terminate: bool = False, signal: str | None = None, wait: bool = False, timeout: float | None = None
    ) -> None:
        for each in self.results:
            each.revoke(terminate=terminate, signal=signal)


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
