"""Job results: what became of a job pushed with ``sidekiq_options(retain=seconds)``.

A retained job gets one Redis HASH, ``keys.result(jid)``, that lives ``retain`` seconds after its
last change: status, timestamps, attempts, the return value (JSON-native, at most
``JOBSAPP["RESULT_MAX_BYTES"]`` encoded) and the last error. A job without ``retain`` writes
nothing here and costs one dict lookup (``"retain" in item``) in ``middleware.run_server_chain``.
This is the store ``jobsapp.django_tasks`` and ``jobsapp.celery`` read.

Who writes, in which thread, and in how many round trips:

- the pushing thread (``client._write``): status ``queued`` or ``scheduled`` with the class,
  queue, arguments and times, in the same pipeline as the push and before it, so a worker can
  never see the job before its record exists;
- the processor thread, through ``Recorder`` (hooked into the server chain and its notifications):
  ``running`` when an attempt starts (``attempts`` incremented), then the outcome: ``succeeded``
  with the value, ``retrying`` with the error and the next attempt time (kept alive at least
  until that attempt plus ``retain``), or ``failed`` (the dead set, a discarded job,
  ``NoRetryError``, a poison job). The changes go through the process's ``Writer`` thread, which
  writes them in batches (one ``result_write.lua`` call per batch); an outcome waits until it is written, so an
  acknowledged job has its final record. A finished record is indexed in the ``keys.RESULTS`` ZSET
  by its expiry time, which the dashboard's Completed page and ``jobs results`` read; expired
  members are trimmed by every finish.

A record that cannot be written (Redis gone) is logged and skipped: results never change where a
job goes, and the job itself is acknowledged, retried or buried as it would be without them.
A return value that is not JSON-native or is too large is not stored: the job still succeeded,
and the record says why in ``value_error``.

Statuses: ``queued``, ``scheduled`` (also a job waiting in the schedule set after a retry was
moved there by hand), ``running``, ``retrying``, ``succeeded``, ``failed``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import keys, scripts
from .conf import jobs_settings
from .connection import REDIS_ERRORS, get_redis
from .payload import JSON_ENCODER, Item, check_json_native, now, parse_json

if TYPE_CHECKING:
    import redis

    from .job import Job

logger = logging.getLogger("jobsapp.results")

#: A record's fields as written: names to text.
Fields = dict[str, str]


def _mapping(fields: Fields) -> Mapping[Any, Any]:
    """``fields`` as redis-py's ``hset(mapping=)`` takes it (its stub's key type is invariant)."""
    return fields


QUEUED = "queued"
SCHEDULED = "scheduled"
RUNNING = "running"
RETRYING = "retrying"
SUCCEEDED = "succeeded"
FAILED = "failed"
STATUSES = (QUEUED, SCHEDULED, RUNNING, RETRYING, SUCCEEDED, FAILED)
FINISHED_STATUSES = (SUCCEEDED, FAILED)

#: Payload option that turns results on, in seconds.
RETAIN_OPTION = "retain"
#: Longest traceback text kept (the end of it, where the error is).
TRACEBACK_MAX_CHARS = 20_000


def retain_seconds(item: Item) -> float | None:
    """The item's ``retain`` in seconds, None when absent; ValueError for anything but a positive number."""
    value = item.get(RETAIN_OPTION)
    if value is None or value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
        raise ValueError(f'"retain" must be a positive number of seconds, not {value!r}')
    return float(value)


def _ttl(seconds: float) -> int:
    return max(1, int(seconds + 0.999))


_worker_name: tuple[int, str] | None = None


def worker_name() -> str:
    """``hostname:pid``, the prefix of the process identity in the ``processes`` set (cached per process)."""
    global _worker_name
    pid = os.getpid()
    if _worker_name is None or _worker_name[0] != pid:
        _worker_name = (pid, f"{socket.gethostname()}:{pid}")
    return _worker_name[1]


def _identity_fields(item: Item) -> Fields:
    fields = {
        "jid": str(item.get("jid", "")),
        "class": str(item.get("class", "")),
        "queue": str(item.get("queue", "")),
        "args": JSON_ENCODER.encode(item.get("args", [])),
        "retain_seconds": repr(float(item[RETAIN_OPTION])),
    }
    if item.get("kwargs"):
        fields["kwargs"] = JSON_ENCODER.encode(item["kwargs"])
    for name in ("created_at", "enqueued_at"):
        value = item.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            fields[name] = repr(float(value))
    return fields


# --- the pushing side --------------------------------------------------------------------


def pushed_fields(item: Item, *, scheduled_at: float | None) -> Fields:
    """The first record of a job about to be pushed (validated ``retain`` already)."""
    fields = _identity_fields(item)
    if scheduled_at is None:
        fields["status"] = QUEUED
    else:
        fields["status"] = SCHEDULED
        fields["scheduled_at"] = repr(scheduled_at)
    return fields


def add_pushed(pipe: redis.client.Pipeline, jid: str, fields: Fields, *, retain: float, scheduled_at: float | None) -> None:
    """Queue the record's first write on ``pipe`` (the push's own pipeline, before the push)."""
    key = keys.result(jid)
    waiting_seconds = max(0.0, scheduled_at - now()) if scheduled_at is not None else 0.0
    pipe.hset(key, mapping=_mapping(fields))
    pipe.expire(key, _ttl(waiting_seconds + retain))


# --- the consuming side ------------------------------------------------------------------


def _error_fields(exception: BaseException | None) -> dict[str, str]:
    """The last error's fields. An exception that carries ``reported_exception`` (Celery's
    ``Retry``, which wraps the error that caused it) is recorded as that one."""
    reported = getattr(exception, "reported_exception", None)
    if isinstance(reported, BaseException):
        exception = reported
    if exception is None:
        return {}
    from .error_fields import safe_message

    kind = type(exception)
    text = "".join(traceback.format_exception(kind, exception, exception.__traceback__))
    return {
        "error_class": f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__qualname__,
        "error_message": safe_message(exception)[: jobs_settings.ERROR_MESSAGE_MAX_CHARS],
        "error_traceback": text[-TRACEBACK_MAX_CHARS:],
    }


def _value_fields(value: Any) -> dict[str, str]:
    try:
        check_json_native(value, "the return value")
    except (TypeError, ValueError) as exc:  # the job succeeded; only its value is not kept
        return {"value_error": str(exc)[:1000]}
    encoded = JSON_ENCODER.encode(value)
    limit = jobs_settings.RESULT_MAX_BYTES
    if limit and len(encoded.encode("utf-8")) > limit:
        return {"value_error": f"the return value is over the {limit}-byte limit (JOBSAPP['RESULT_MAX_BYTES']); it was not kept"}
    return {"value": encoded}


@dataclass(slots=True)
class _Write:
    """One record change: the commands ``_add`` queues on a pipeline."""

    jid: str
    fields: Fields
    ttl_seconds: float
    attempt: bool
    finished: bool
    shard: str
    done: threading.Event | None = None


def _changes(writes: list[_Write]) -> list[tuple[str, float, str, dict[str, str]]]:
    """The ``scripts.result_write`` changes of ``writes``, in order."""
    return [
        (write.jid, float(write.ttl_seconds), "start" if write.attempt else "finish" if write.finished else "update", write.fields)
        for write in writes
    ]


class Writer:
    """Thread ``jobsapp.results-writer``, one per process (started on first use, again after a
    fork): it writes the processor threads' record changes in batches, one ``result_write.lua``
    call per shard and batch, in the order they were submitted (group commit: the busier the process, the bigger
    the batches, so a retained job costs a fraction of a round trip).

    A start (``running``) does not wait. A final change (succeeded, retrying, failed) waits until
    its batch is written, at most ``WAIT_SECONDS``, before the processor thread goes on: the engine
    acknowledges a job after its thread returns, so an acknowledged job has its final record. A
    batch Redis refuses is logged and dropped (the jobs go on as without results)."""

    WAIT_SECONDS = 30.0

    def __init__(self, connection: Callable[[str], redis.Redis]) -> None:
        self.connection = connection
        self._condition = threading.Condition()
        self._pending: list[_Write] = []
        self._pid: int | None = None

    def submit(self, write: _Write, *, wait: bool) -> None:
        if wait:
            write.done = threading.Event()
        with self._condition:
            if self._pid != os.getpid():  # first use in this process (or a forked child): own thread
                self._pid = os.getpid()
                self._pending = []
                threading.Thread(target=self._run, name="jobsapp.results-writer", daemon=True).start()
            self._pending.append(write)
            self._condition.notify()
        if write.done is not None and not write.done.wait(self.WAIT_SECONDS):
            logger.warning("jid=%s result record not confirmed within %g s; the job goes on", write.jid, self.WAIT_SECONDS)

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._pending:
                    self._condition.wait()
                batch, self._pending = self._pending, []
            self.apply(batch)

    def apply(self, batch: list[_Write]) -> None:
        """Write ``batch`` (one MULTI/EXEC per shard) and release its waiters, whatever happens."""
        try:
            by_shard: dict[str, list[_Write]] = {}
            for write in batch:
                by_shard.setdefault(write.shard, []).append(write)
            for shard, writes in by_shard.items():
                try:
                    scripts.result_write(self.connection(shard), now=now(), changes=_changes(writes))
                except REDIS_ERRORS as exc:  # the jobs go on (or are filed) as without results; only their records are missing
                    logger.warning("%d result record change(s) not written: %s", len(writes), exc)
        finally:
            for write in batch:
                if write.done is not None:
                    write.done.set()


class Recorder:
    """Writes a retained job's record around each attempt. One shared instance, no per-job state."""

    def __init__(self, connection: Callable[[str], redis.Redis] = get_redis, clock: Callable[[], float] = now) -> None:
        self.connection = connection
        self.clock = clock
        self.writer = Writer(connection)

    def _write(
        self, jid: str, fields: Fields, *, ttl_seconds: float, attempt: bool = False, finished: bool = False, wait: bool | None = None
    ) -> None:
        """Hand a change to the writer thread; wait until it is written (``wait``, by default for
        anything but a start)."""
        from . import shards

        write = _Write(jid, fields, ttl_seconds, attempt, finished, shards.current())
        self.writer.submit(write, wait=not attempt if wait is None else wait)

    def run(self, job: Job, item: Item, final: Callable[[], Any]) -> Any:
        """Record the start of an attempt, run it, record its value when it returns."""
        retain = safe_retain_seconds(item)
        if retain is None:
            return final()
        jid = str(item.get("jid", ""))
        started = self.clock()
        worker = worker_name()
        fields = {**_identity_fields(item), "status": RUNNING, "last_attempted_at": repr(started), "worker": worker}
        fields[f"worker.{attempt_number(item)}"] = worker
        self._write(jid, fields, ttl_seconds=retain, attempt=True)
        value = final()
        finished = {"status": SUCCEEDED, "finished_at": repr(self.clock()), **_value_fields(value)}
        self._write(jid, finished, ttl_seconds=retain, finished=True)
        return value

    def on_retry(self, item: Item, exception: BaseException, *, retry_count: int, run_at: float) -> None:
        retain = safe_retain_seconds(item)
        if retain is None:
            return
        fields = {"status": RETRYING, "next_attempt_at": repr(run_at), "retry_count": str(retry_count), **_error_fields(exception)}
        waiting_seconds = max(0.0, run_at - self.clock())
        self._write(str(item.get("jid", "")), fields, ttl_seconds=waiting_seconds + retain)

    def on_requeue(self, item: Item) -> None:
        """The job went back to its queue unfinished (shutdown, a dead process's recovery): queued again."""
        retain = safe_retain_seconds(item)
        if retain is None or "jid" not in item:
            return
        self._write(str(item["jid"]), {"status": QUEUED}, ttl_seconds=retain, wait=True)

    def on_dead(self, item: Item, exception: BaseException | None, *, reason: str) -> None:
        retain = safe_retain_seconds(item)
        if retain is None:
            return
        fields = {"status": FAILED, "finished_at": repr(self.clock()), "reason": reason, **_error_fields(exception)}
        if "class" not in item or "jid" not in item:
            return
        self._write(str(item["jid"]), {**_identity_fields(item), **fields}, ttl_seconds=retain, finished=True)


recorder = Recorder()


def write_outcome(jid: str, fields: Fields, *, retain_seconds: float) -> None:
    """Record a final outcome decided outside a run (a revoked task, a chain step that will never
    run): ``status`` and error fields, indexed with the finished jobs. Logged, never raised, on a
    Redis error."""
    recorder._write(jid, {"jid": jid, "finished_at": repr(now()), **fields}, ttl_seconds=retain_seconds, finished=True, wait=True)


def attempt_number(item: Item) -> int:
    """1 for a job's first run, 2 after its first failure...: Sidekiq's ``retry_count`` (0 after
    the first failure) plus two. A run after a crash (recovered, not failed) counts again as the same."""
    count = item.get("retry_count")
    return count + 2 if type(count) is int and count >= 0 else 1


def safe_retain_seconds(item: Item) -> float | None:
    """``retain_seconds`` for items read back from Redis: a bad value means no record."""
    try:
        return retain_seconds(item)
    except ValueError:
        return None


# --- reading -----------------------------------------------------------------------------


def _float(fields: dict[str, str], name: str) -> float | None:
    text = fields.get(name)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _json(fields: dict[str, str], name: str, default: Any) -> Any:
    text = fields.get(name)
    if text is None:
        return default
    try:
        return parse_json(text)
    except ValueError:  # any bytes another client wrote (nested 100,000 deep too): the default
        return default


@dataclass(frozen=True, slots=True)
class JobResult:
    """A retained job's record as read from Redis (a snapshot: read again for news)."""

    jid: str
    status: str
    job_class: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    has_value: bool
    value: Any
    value_error: str
    attempts: int
    created_at: float | None
    enqueued_at: float | None
    scheduled_at: float | None
    started_at: float | None
    last_attempted_at: float | None
    finished_at: float | None
    next_attempt_at: float | None
    error_class: str
    error_message: str
    error_traceback: str
    reason: str
    worker: str
    worker_ids: list[str]  # per attempt, oldest first (Django's TaskResult.worker_ids)
    retain_seconds: float | None

    @property
    def ready(self) -> bool:
        """Finished for good: succeeded or failed (no attempt will follow)."""
        return self.status in FINISHED_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> JobResult:
        attempts_text = fields.get("attempts", "0")
        return cls(
            jid=fields.get("jid", ""),
            status=fields.get("status", ""),
            job_class=fields.get("class", ""),
            queue=fields.get("queue", ""),
            args=_json(fields, "args", []),
            kwargs=_json(fields, "kwargs", {}),
            has_value="value" in fields,
            value=_json(fields, "value", None),
            value_error=fields.get("value_error", ""),
            attempts=int(attempts_text) if attempts_text.isdigit() else 0,
            created_at=_float(fields, "created_at"),
            enqueued_at=_float(fields, "enqueued_at"),
            scheduled_at=_float(fields, "scheduled_at"),
            started_at=_float(fields, "started_at"),
            last_attempted_at=_float(fields, "last_attempted_at"),
            finished_at=_float(fields, "finished_at"),
            next_attempt_at=_float(fields, "next_attempt_at"),
            error_class=fields.get("error_class", ""),
            error_message=fields.get("error_message", ""),
            error_traceback=fields.get("error_traceback", ""),
            reason=fields.get("reason", ""),
            worker=fields.get("worker", ""),
            worker_ids=[fields[name] for name in sorted((name for name in fields if name.startswith("worker.")), key=_attempt_key)],
            retain_seconds=_float(fields, "retain_seconds"),
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the CLI and APIs."""
        return {
            "jid": self.jid,
            "status": self.status,
            "class": self.job_class,
            "queue": self.queue,
            "args": self.args,
            "kwargs": self.kwargs,
            "value": self.value,
            "value_error": self.value_error or None,
            "attempts": self.attempts,
            "created_at": self.created_at,
            "enqueued_at": self.enqueued_at,
            "scheduled_at": self.scheduled_at,
            "started_at": self.started_at,
            "last_attempted_at": self.last_attempted_at,
            "finished_at": self.finished_at,
            "next_attempt_at": self.next_attempt_at,
            "error_class": self.error_class or None,
            "error_message": self.error_message or None,
            "reason": self.reason or None,
            "worker": self.worker or None,
        }


def _attempt_key(name: str) -> int:
    suffix = name.partition(".")[2]
    return int(suffix) if suffix.isdigit() else 0


def _decode(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {
        (key.decode() if isinstance(key, bytes) else key): (value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
        for key, value in raw.items()
    }


def get(jid: str, *, connection: redis.Redis | None = None) -> JobResult | None:
    """The record of a retained job, or None (never retained, expired, forgotten, or no such jid)."""
    if not isinstance(jid, str) or not jid or len(jid) > 200:
        return None
    from . import shards
    from .connection import CONNECTION_ERRORS, unavailable

    # The record lives on the shard its job was pushed to: this context's first, then the others.
    current = shards.current()
    clients = (
        [connection] if connection is not None else [get_redis(name) for name in [current, *(n for n in shards.names() if n != current)]]
    )
    for client in clients:
        try:
            raw = client.hgetall(keys.result(jid))
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc) from exc
        if raw:
            return JobResult.from_fields(_decode(raw))
    return None


def forget(jid: str) -> bool:
    """Delete a job's record now, on every shard (Celery's ``AsyncResult.forget``); True when there was one."""
    from . import shards
    from .connection import CONNECTION_ERRORS, unavailable

    deleted = 0
    for name in shards.names():
        try:
            pipe = get_redis(name).pipeline(transaction=True)
            pipe.delete(keys.result(jid))
            pipe.zrem(keys.RESULTS, jid)
            count, _ = pipe.execute()
        except CONNECTION_ERRORS as exc:
            raise unavailable(exc) from exc
        deleted += int(count)
    return bool(deleted)
