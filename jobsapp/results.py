"""Job results: what became of a job pushed with ``sidekiq_options(retain=seconds)``.

A retained job gets one Redis HASH, ``keys.result(jid)``, that lives ``retain`` seconds after its
last change: status, timestamps, attempts, the return value (JSON-native, at most
``JOBSAPP["RESULT_MAX_BYTES"]`` encoded) and the last error. A job without ``retain`` writes
nothing here and costs one dict lookup (``"retain" in item``) per moment of the door's table
(``jobsapp.ending``'s ``results`` row: around the run, at its end, when it is put back).
This is the store ``jobsapp.django_tasks`` and ``jobsapp.celery`` read.

Who writes, in which thread, and in how many round trips:

- the pushing thread (``client._write``): status ``queued`` or ``scheduled`` with the class,
  queue, arguments and times, in the same pipeline as the push and before it, so a worker can
  never see the job before its record exists;
- the processor thread, through ``Recorder`` (around the server chain, and the "job ended" door):
  ``running`` when an attempt starts (``attempts`` incremented), then the outcome: ``succeeded``
  with the value, ``retrying`` with the error and the next attempt time (kept alive at least
  until that attempt plus ``retain``), or ``failed`` (the dead set, a discarded job,
  ``NoRetryError``, a poison job). The changes go through the process's ``Writer`` thread, which
  writes them in batches (one ``result_write.lua`` call per batch); an outcome waits until it is written, so an
  acknowledged job has its final record. A finished record is indexed in the ``keys.RESULTS`` ZSET
  by its expiry time, which the dashboard's Completed page and ``jobs results`` read; expired
  members are trimmed by every finish.

A record that cannot be written (Redis gone) is skipped, logged once per outage: results never change where a
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
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import keys, shards
from .conf import jobs_settings
from .connection import CONNECTION_ERRORS, get_redis, unavailable
from .error_fields import safe_message
from .options import RETAIN_KEY, clamped_retain_seconds
from .options import RETAIN_MAX_SECONDS as RETAIN_MAX_SECONDS
from .options import retain_seconds as retain_seconds
from .payload import Item, check_json_native, compact_json, now, parse_json

if TYPE_CHECKING:
    import redis


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

#: Payload option that turns results on, in seconds (its rule: ``jobsapp.options``).
RETAIN_OPTION = RETAIN_KEY
#: Record fields a running job writes about itself (``jobsapp.celery``'s ``update_state``, ``Ignore``).
CUSTOM_STATE_FIELD = "custom_state"
CUSTOM_META_FIELD = "custom_meta"
IGNORED_FIELD = "ignored"
#: Longest traceback text kept (the end of it, where the error is).
TRACEBACK_MAX_CHARS = 20_000


#: The longest TTL a record is given (a job scheduled far ahead plus its ``retain``): well under
#: what Redis's EXPIRE accepts, so a record is never left without one.
RECORD_TTL_MAX_SECONDS = 100 * 365 * 24 * 3600


def _ttl(seconds: float) -> int:
    return max(1, min(int(seconds + 0.999), RECORD_TTL_MAX_SECONDS))


_worker_name: tuple[int, str] | None = None


def worker_name() -> str:
    """``hostname:pid``, the prefix of the process identity in the ``processes`` set (cached per process)."""
    global _worker_name
    pid = os.getpid()
    if _worker_name is None or _worker_name[0] != pid:
        _worker_name = (pid, f"{socket.gethostname()}:{pid}")
    return _worker_name[1]


def identity_record_fields(item: Item) -> Fields:
    fields = {
        "jid": str(item.get("jid", "")),
        "class": str(item.get("class", "")),
        "queue": str(item.get("queue", "")),
        "args": compact_json(item.get("args", [])),
        "retain_seconds": repr(clamped_retain_seconds(item) or 0.0),
    }
    if item.get("kwargs"):
        fields["kwargs"] = compact_json(item["kwargs"])
    for name in ("created_at", "enqueued_at"):
        value = item.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            fields[name] = repr(float(value))
    return fields


# --- the pushing side --------------------------------------------------------------------


def pushed_fields(item: Item, *, scheduled_at: float | None) -> Fields:
    """The first record of a job about to be pushed (validated ``retain`` already)."""
    fields = identity_record_fields(item)
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


def error_record_fields(exception: BaseException | None) -> dict[str, str]:
    """The last error's fields. An exception that carries ``reported_exception`` (Celery's
    ``Retry``, which wraps the error that caused it) is recorded as that one."""
    reported = getattr(exception, "reported_exception", None)
    if isinstance(reported, BaseException):
        exception = reported
    if exception is None:
        return {}
    kind = type(exception)
    text = "".join(traceback.format_exception(kind, exception, exception.__traceback__))
    return {
        "error_class": f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__qualname__,
        "error_message": safe_message(exception)[: jobs_settings.ERROR_MESSAGE_MAX_CHARS],
        "error_traceback": text[-TRACEBACK_MAX_CHARS:],
    }


def value_record_fields(value: Any) -> dict[str, str]:
    try:
        check_json_native(value, "the return value", subject="return values")
    except (TypeError, ValueError) as exc:  # the job succeeded; only its value is not kept
        return {"value_error": str(exc)[:1000]}
    encoded = compact_json(value)
    limit = jobs_settings.RESULT_MAX_BYTES
    if limit and len(encoded.encode("utf-8")) > limit:
        return {"value_error": f"the return value is over the {limit}-byte limit (JOBSAPP['RESULT_MAX_BYTES']); it was not kept"}
    return {"value": encoded}


def attempt_number(item: Item) -> int:
    """1 for a job's first run, 2 after its first failure...: Sidekiq's ``retry_count`` (0 after
    the first failure) plus two. A run after a crash (recovered, not failed) counts again as the same."""
    count = item.get("retry_count")
    return count + 2 if type(count) is int and count >= 0 else 1


def safe_retain_seconds(item: Item) -> float | None:
    """``retain`` of an item read back from Redis (perhaps written by another client): clamped to
    ``RETAIN_MAX_SECONDS``; a value that is not a positive number means no record."""
    return clamped_retain_seconds(item)


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
    # a state the job reported itself while running (Celery's ``update_state``) and its metadata;
    # ``ignored``: the job said to record nothing more about it (Celery's ``Ignore``)
    custom_state: str = ""
    custom_meta: Any = None
    ignored: bool = False

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
            custom_state=fields.get(CUSTOM_STATE_FIELD, ""),
            custom_meta=_json(fields, CUSTOM_META_FIELD, None),
            ignored=fields.get(IGNORED_FIELD) == "1",
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
