"""What follows a Celery-style task, decided in the worker that ran it (its processor thread).

On success (``succeeded``), from the task's payload:

- each ``link`` callback is pushed with the task's value prepended (each one gets the value);
- the next step of its chain is pushed with the value and the rest of the chain;
- a chord header task records its value with ``chord_part.lua``: the part that completes the set
  pushes ``celery.chord_unlock`` in the same script, so no crash or lost reply can separate the
  "part done" marker from the callback's push; the unlock has the callback's priority
  (``body_priority``), so a prioritised callback does not wait behind its queue's backlog
  twice. ``ChordUnlock`` (any worker) reads the values in
  header order from ``keys.chord`` and pushes the callback with them.

A follow-up that cannot be pushed because of what it is (its arguments exceed
``MAX_PAYLOAD_BYTES``, a value JSON cannot carry) is recorded FAILED with the reason, through its
result, and the task that succeeded stays SUCCESS. A step naming a task this process does not
define is pushed by name (``canvas.push_by_name``): a worker that defines it runs it, one that
does not files it as an unknown class. A Redis error while pushing retries the job without
running the task's function again (``SUCCEEDED_KEY`` carries its value): what was already pushed
is pushed again with the same ids, and a chord part already recorded is not recorded twice.

On failure for good (``failed``): the later steps of its chain and its chord's callback are
recorded FAILED (``ChordError`` for the callback, whose errbacks are then called), and the task's
own errbacks are called as Celery 5 calls them: a task whose function takes more than one
positional argument (and is not ``bind=True``) is called here with ``(request, exc, traceback)``;
any other errback is pushed as a task with the failed task's id as its first argument.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import traceback as traceback_module
from collections.abc import Sequence
from typing import Any

import redis

from .. import faults, keys, result_writer, results, scripts
from ..connection import get_redis
from ..errors import PayloadTooLarge, RedisUnavailable
from ..job import Job, sidekiq_options
from ..payload import Item, compact_json, encode, normalize_item, now
from ..priority import PRIORITY_KEY, from_celery
from . import lineage
from .canvas import (
    CHAIN_KEY,
    CHORD_KEY,
    CHORD_OPTION,
    ENGINE_RETRY_LIMIT,
    ERRBACK_KEY,
    LAZY_FIELD,
    LINK_KEY,
    RESULT_EXPIRES_SECONDS,
    NotRegistered,
    Signature,
    _list_option,
    from_dict,
    install_chord_bookkeeping,
    lookup_task,
    push_by_name,
    push_step,
    result_ids,
    tasks_of,
)
from .exception_fields import CHORD_DEPENDENCY_FIELD, EXCEPTION_FIELD, exception_fields
from .exceptions import ChordError, Retry
from .values import decoded

logger = logging.getLogger(__name__)

#: The wire name of the job that applies a completed chord's callback (Celery's own task name).
CHORD_UNLOCK = "celery.chord_unlock"

#: Payload extra of a task whose function returned but whose follow-ups could not all be pushed.
SUCCEEDED_KEY = "celery_succeeded"
#: Seconds before a job whose follow-ups met a Redis error tries them again.
FOLLOW_UP_RETRY_SECONDS = 1.0

#: Errors that make a follow-up impossible to push whatever happens next: recorded, not retried.
UNPUSHABLE = (PayloadTooLarge, TypeError, ValueError, NotImplementedError)


def error_fields(exception: BaseException) -> dict[str, str]:
    """A result record's error fields for ``exception`` (builtins by their bare name, as Sidekiq)."""
    kind = type(exception)
    error_class = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return {"error_class": error_class, "error_message": str(exception), **exception_fields(exception)}


def record_failed(step: dict[str, Any], fields: dict[str, str], *, reason: str) -> None:
    """Record every task of ``step`` FAILED with ``fields`` (it will never run)."""
    for task_id in result_ids(step):
        result_writer.write_outcome(task_id, {"status": results.FAILED, "reason": reason, **fields}, retain_seconds=RESULT_EXPIRES_SECONDS)


def push_follow_up(step: dict[str, Any], prepend: Sequence[Any], *, rest: Sequence[dict[str, Any]] = ()) -> None:
    """Push ``step`` (and ``rest`` after it); record it and ``rest`` FAILED when it cannot be pushed."""
    try:
        push_step(step, prepend, rest=rest)
    except UNPUSHABLE as exc:  # the step (and what follows it) never runs: FAILED with the reason
        logger.warning("jobsapp.celery: a follow-up of a task could not be pushed and is recorded FAILED: %s", exc)
        fields = error_fields(exc)
        for each in (step, *rest):
            record_failed(each, fields, reason="follow_up_refused")


# --- success ---------------------------------------------------------------------------------


def succeeded(jid: str, item: Item, value: Any) -> None:
    """Push what follows a task that returned ``value``. A Redis error (down, timed out, refusing
    writes) raises ``Retry``: the job is retried, but its function does not run again; the next
    run pushes the follow-ups with the same ``value`` (``resumed``), and what was pushed already
    is pushed again with the same ids (a chord part is never recorded twice)."""
    try:
        _push_follow_ups(jid, item, value)
    except (redis.RedisError, RedisUnavailable) as exc:  # the job is retried; its function does not run again
        item[SUCCEEDED_KEY] = {"value": value}  # rides in the retried payload
        raise Retry(exc=exc, countdown=FOLLOW_UP_RETRY_SECONDS) from exc


def resumed(item: Item) -> tuple[bool, Any]:
    """``(True, value)`` when this run only has to push what follows a value already returned."""
    previous = item.get(SUCCEEDED_KEY)
    if isinstance(previous, dict) and "value" in previous:
        return True, previous["value"]
    return False, None


def _push_follow_ups(jid: str, item: Item, value: Any) -> None:
    links = item.get(LINK_KEY)
    for callback in links if isinstance(links, list) else []:
        if isinstance(callback, dict):
            push_follow_up(callback, [value])
    chain = item.get(CHAIN_KEY)
    if isinstance(chain, list) and chain:
        push_follow_up(chain[0], [value], rest=chain[1:])
    chord = item.get(CHORD_KEY)
    if isinstance(chord, dict):  # a replacement's last task records the part of the task it replaced
        chord_part_done(chord, str(chord.get("part") or jid), value, queue=str(item.get("queue") or "default"))


#: The chord hash's count of the parts added later (chord_part.lua reads it; it is not a part).
ADDED_FIELD = "+added"


def add_chord_part(chord_id: str, jid: str) -> None:
    """Make task ``jid`` a part of chord ``chord_id`` after the chord was applied (before it is pushed)."""
    pipe = get_redis().pipeline(transaction=False)  # in this order: counted before its value can be recorded
    pipe.hincrby(keys.chord(chord_id), ADDED_FIELD, 1)
    pipe.rpush(keys.chord_added(chord_id), jid)
    pipe.expire(keys.chord(chord_id), RESULT_EXPIRES_SECONDS)
    pipe.expire(keys.chord_added(chord_id), RESULT_EXPIRES_SECONDS)
    pipe.execute()


def chord_part_done(chord: dict[str, Any], jid: str, value: Any, *, queue: str) -> None:
    """Record this header task's value; if it completes the set, ``celery.chord_unlock`` is pushed
    by the same script."""
    chord_id = str(chord.get("id", ""))
    header = chord.get("header")
    if not chord_id or not isinstance(header, list):
        return
    lineage_now = lineage.current() or {}
    # the callback descends from the header task that completes the chord, as in Celery
    completed = {**chord, "completed_by": jid, "root_id": lineage_now.get("root_id") or chord.get("root_id")}
    completed.pop("part", None)
    unlock = normalize_item({"class": CHORD_UNLOCK, "args": [completed], "queue": queue, "retry": ENGINE_RETRY_LIMIT}, timestamp=now())
    level = body_priority(chord.get("body"))
    if level is not None:  # the unlock runs at the callback's priority, which its own push keeps
        unlock[PRIORITY_KEY] = level
    unlock["enqueued_at"] = unlock["created_at"]
    try:
        unlock_json = encode(unlock)
        value_json = compact_json(value)
    except UNPUSHABLE as exc:  # a callback too big to carry, a value JSON cannot hold: the callback never runs
        record_failed(chord.get("body") or {}, error_fields(exc), reason="follow_up_refused")
        return
    scripts.chord_part(
        get_redis(),
        chord_id=chord_id,
        jid=jid,
        value_json=value_json,
        header_size=len(header) + (1 if chord.get(LAZY_FIELD) else 0),  # a lazy header's seal is a part
        ttl_seconds=RESULT_EXPIRES_SECONDS,
        callback_job=unlock_json,
        queue=queue,
        level=level,
    )
    if faults.POINT:
        faults.reach("chord_part_recorded")


def body_priority(body: object) -> int | None:
    """The engine's priority (``jobsapp.priority``) of a chord's callback: its signature's
    ``priority`` option, else its task's own ``priority``, on Celery's scale (0..9, lower first;
    ``from_celery``); None for a plain job (Celery's 0, none, or a value that is not Celery's)."""
    if not isinstance(body, dict):
        return None
    options = body.get("options")
    value = options.get("priority") if isinstance(options, dict) else None
    if value is None:
        try:
            value = getattr(lookup_task(str(body.get("task", ""))), "priority", None)
        except NotRegistered:  # defined in another worker: its push (by name) carries the option only
            value = None
    if value is None:
        return None
    try:
        return from_celery(value) or None
    except ValueError:  # not Celery's scale: the unlock is a plain job, the callback's own push decides
        return None


@sidekiq_options(class_name=CHORD_UNLOCK, retry=25)
class ChordUnlock(Job):
    """Applies a completed chord's callback with the header values in header order. Pushed once,
    by the script that records the last part; a Redis error retries it (the callback may then be
    pushed twice, never zero times); a callback too big to push is recorded FAILED."""

    def perform(self, chord: dict[str, Any]) -> None:
        chord_id = str(chord.get("id", ""))
        added = [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in get_redis().lrange(keys.chord_added(chord_id), 0, -1)]
        header = [str(each) for each in chord.get("header") or []] + added  # the parts added later come after, in order
        body = chord.get("body") or {}
        stored = get_redis().hmget(keys.chord(chord_id), header) if header else []
        if any(raw is None for raw in stored):  # the chord's hash expired before the callback ran
            record_failed(
                body,
                {"error_class": f"{ChordError.__module__}.{ChordError.__qualname__}", "error_message": "the chord's header values expired"},
                reason="dependency_failed",
            )
            return
        values = [json.loads(raw) for raw in stored if raw is not None]
        with lineage.publishing_from(chord.get("root_id"), chord.get("completed_by")):
            push_follow_up(body, [values])


# --- failure ---------------------------------------------------------------------------------


def failed(task_id: str, item: Item, exception: BaseException, *, request: Any = None) -> None:
    """Record what depends on a task that failed for good, and call its errbacks."""
    fields = error_fields(exception)
    chain = item.get(CHAIN_KEY)
    for step in chain if isinstance(chain, list) else []:
        if isinstance(step, dict):
            record_failed(step, fields, reason="dependency_failed")
            _fail_chords_waiting_on(step, task_id, fields)  # the chain was (or ends in) a chord's header part
    chord = item.get(CHORD_KEY)
    if isinstance(chord, dict):
        _fail_chord(chord, task_id, fields)
    errbacks = item.get(ERRBACK_KEY)
    if isinstance(errbacks, list) and errbacks:
        text = "".join(traceback_module.format_exception(type(exception), exception, exception.__traceback__))
        call_errbacks(errbacks, task_id, exception, request=request, traceback_text=text)


def _fail_chord(chord: dict[str, Any], task_id: str, fields: dict[str, str]) -> None:
    """A header part failed for good: the callback is recorded FAILED (``ChordError``) and its
    errbacks are called once."""
    body = chord.get("body")
    if not isinstance(body, dict):
        return
    marker = keys.chord_failed(str(chord.get("id", "")))
    if not get_redis().set(marker, task_id, nx=True, ex=RESULT_EXPIRES_SECONDS) and get_redis().get(marker) != task_id.encode():
        return  # another part of this run failed first (a rerun of that part does it again): callback failed, errbacks called once
    error = ChordError(f"Dependency {task_id} raised {fields['error_class']}({fields['error_message']!r})")
    # the callback's result raises a ChordError that is also the header task's own exception
    # (result.chord_error): ``except ChordError`` (the canvas guide) and ``except HeaderError``
    # (Celery's Redis backend, its integration suite) both catch it
    chord_fields = {**error_fields(error), CHORD_DEPENDENCY_FIELD: fields.get(EXCEPTION_FIELD, "")}
    record_failed(body, chord_fields, reason="dependency_failed")
    for task in _called_first(body):  # as Celery, whose callback is the first task of a chain body
        errbacks = _list_option((task.get("options") or {}).get("link_error"))
        if errbacks:
            call_errbacks(errbacks, str((task.get("options") or {}).get("task_id") or ""), error, request=None, traceback_text=None)
    _fail_chords_waiting_on(body, task_id, fields)  # the callback was a header part of an outer chord


def _fail_chords_waiting_on(step: dict[str, Any], task_id: str, fields: dict[str, str]) -> None:
    """Fail the chords a step that will never run was a header part of (its final tasks carry the chord), each once."""
    failed_runs: set[str] = set()
    for task in tasks_of(step):
        waiting = (task.get("options") or {}).get(CHORD_OPTION)
        if isinstance(waiting, dict) and str(waiting.get("id")) not in failed_runs:
            failed_runs.add(str(waiting.get("id")))
            _fail_chord(waiting, task_id, fields)


def _called_first(step: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks a step starts with: a chain's first step's, each task of a group, a chord's callback's."""
    kind = step.get("subtask_type")
    if kind == "chain":
        return _called_first(step["kwargs"]["tasks"][0]) if step["kwargs"]["tasks"] else []
    if kind == "group":
        return [task for each in step["kwargs"]["tasks"] for task in _called_first(each)]
    if kind == "chord":
        body = step["kwargs"]["body"]
        return _called_first(body) if body else []
    return [step]


class _FakeRequest:
    """The request an errback of a task that never ran gets (Celery's fake request): its id."""

    def __init__(self, task_id: str) -> None:
        self.id = task_id
        self.args: list[Any] = []
        self.kwargs: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<Context {{'id': {self.id!r}}}>"


def _positional_count(function: Any) -> int | None:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # no introspectable signature
        return None
    if any(each.kind == each.VAR_POSITIONAL for each in parameters):
        return 2  # takes any number: counts as more than one
    return len([each for each in parameters if each.kind in (each.POSITIONAL_ONLY, each.POSITIONAL_OR_KEYWORD)])


def _takes_request(task: Any, errback: Any = None) -> bool:
    """Celery 5's test: more than one positional parameter left once the errback's stored
    arguments are bound (they follow the task id when it is called), and not ``bind=True``."""
    if getattr(task, "bind", False):
        return False
    count = None
    if errback is not None and not errback.immutable and (errback.args or errback.kwargs):
        try:
            count = _positional_count(functools.partial(task.function, *errback.args, **errback.kwargs))
        except (TypeError, ValueError):  # arguments the function cannot take: judged on the function alone
            count = None
    if count is None:
        count = _positional_count(task.function)
    return count is not None and count > 1


def call_errbacks(
    errbacks: list[Any], task_id: str, exception: BaseException, *, request: Any, traceback_text: str | None, eager: bool = False
) -> None:
    """Call or push each errback as Celery 5 does; an errback's own error is logged, and changes
    nothing for the failed task."""
    for raw in errbacks:
        if not isinstance(raw, dict):
            continue
        errback: Signature[Any] = from_dict(dict(raw))
        try:
            task = lookup_task(errback.task)
        except NotRegistered:  # not defined here: pushed as a task for a worker that has it
            task = None
        if task is not None and _takes_request(task, errback):
            try:
                args, kwargs = decoded(list(errback.args)), decoded(dict(errback.kwargs))  # as a pushed task gets them
                if errback.immutable:  # called here with its own arguments only, as Celery calls an immutable signature
                    task.function(*args, **kwargs)
                else:
                    task.function(request or _FakeRequest(task_id), exception, traceback_text, *args, **kwargs)
            except Exception:  # the errback failed: logged; the task stays failed
                logger.exception("jobsapp.celery: errback %s of task %s raised", errback.task, task_id)
            continue
        try:
            if eager and task is not None:  # an eager run's errback runs here too
                errback.apply((task_id,))
            else:
                push_follow_up(dict(errback), [task_id])
        except Exception:  # a Redis error: logged; the failed task is filed dead all the same
            logger.exception("jobsapp.celery: errback %s of task %s could not be pushed", errback.task, task_id)


__all__ = ["CHORD_UNLOCK", "ChordUnlock", "call_errbacks", "failed", "push_by_name", "push_follow_up", "succeeded"]


install_chord_bookkeeping(add_chord_part, chord_part_done)  # canvas applies a generator header's chord through them
