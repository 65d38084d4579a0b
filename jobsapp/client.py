"""The producing side: turn items into Redis writes, exactly as Sidekiq's client does.

``push(item)`` and ``push_bulk(item)`` take Sidekiq items (``{"class": "HardWorker", "args": [...]}``),
so Python can enqueue for Ruby workers; ``Job.perform_*`` call them. Each item is normalized
(jid, created_at, option defaults), passed through the client middleware chain (which may stop it),
validated and encoded. Only then is anything written, so bad input raises and writes nothing:

- immediate jobs: ``SADD queues <q>`` and ``LPUSH queue:<q> <json with enqueued_at>``;
- scheduled jobs (``at`` in the future): ``ZADD schedule <at> <json without at/enqueued_at>``.

A bulk push prepares every item first, then writes ``batch_size`` jobs per pipeline (one round
trip), one ``LPUSH`` per queue per batch. A refused connection raises RedisUnavailable; a pipeline
that fails midway may have written earlier batches (their jids were returned to no one, so the
exception says how many were written).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import keys, registry
from .conf import jobs_settings
from .connection import CONNECTION_ERRORS, get_redis, unavailable
from .middleware import client_chain, run_client_chain
from .payload import JSON_ENCODER, check_json_native, encode, normalize_item, now

if TYPE_CHECKING:
    import redis

    from .job import Job

Item = dict[str, Any]

#: Set by jobsapp.testing: receives (job_class, item) instead of Redis. None in production.
interceptor: Callable[[type[Job] | None, Item], None] | None = None


class _Prepared:
    __slots__ = ("at", "data", "jid", "queue")

    def __init__(self, jid: str, queue: str, at: float | None, data: bytes) -> None:
        self.jid = jid
        self.queue = queue
        self.at = at
        self.data = data


def _job_class_for(item: Item, job_class: type[Job] | None) -> type[Job] | None:
    if job_class is not None:
        return job_class
    name = item.get("class")
    return registry.lookup(name) if isinstance(name, str) and registry.is_registered(name) else None


def _prepare(item: Item, job_class: type[Job] | None, connection: redis.Redis, timestamp: float) -> tuple[_Prepared, Item] | None:
    normalized = normalize_item(item, timestamp=timestamp)
    at = normalized.get("at")
    if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float))):
        raise TypeError(f'"at" must be epoch seconds, not {at!r}')
    result = run_client_chain(job_class, normalized, normalized["queue"], connection)
    if result is None:
        return None
    result = dict(result)
    at = result.pop("at", None)
    if at is not None and float(at) > timestamp:
        result.pop("enqueued_at", None)
        scheduled_at: float | None = float(at)
    else:
        result["enqueued_at"] = timestamp
        scheduled_at = None
    return _Prepared(result["jid"], result["queue"], scheduled_at, encode(result)), result


def _write(connection: redis.Redis, prepared: list[_Prepared]) -> None:
    by_queue: dict[str, list[bytes]] = defaultdict(list)
    scheduled: dict[bytes, float] = {}
    for entry in prepared:
        if entry.at is None:
            by_queue[entry.queue].append(entry.data)
        else:
            scheduled[entry.data] = entry.at
    pipe = connection.pipeline(transaction=False)
    if by_queue:
        pipe.sadd(keys.QUEUES, *by_queue)
        for queue, payloads in by_queue.items():
            pipe.lpush(keys.queue(queue), *payloads)
    if scheduled:
        pipe.zadd(keys.SCHEDULE, scheduled)
    pipe.execute()


def push(item: Item, *, job_class: type[Job] | None = None) -> str | None:
    """Enqueue one Sidekiq item; returns its jid, or None when a client middleware stopped it."""
    job_class = _job_class_for(item, job_class)
    connection = get_redis()
    prepared = _prepare(item, job_class, connection, now())
    if prepared is None:
        return None
    entry, final_item = prepared
    if interceptor is not None:
        interceptor(job_class, final_item if entry.at is None else {**final_item, "at": entry.at})
        return entry.jid
    try:
        _write(connection, [entry])
    except CONNECTION_ERRORS as exc:
        raise unavailable(exc) from exc
    return entry.jid


def push_bulk(item: Item, *, batch_size: int = 1000, job_class: type[Job] | None = None) -> list[str | None]:
    """Enqueue one job per element of ``item["args"]`` (a list of argument lists).

    ``item["at"]`` may be one time for all or a list with one per job. Returns the jids in order,
    None where a client middleware stopped that job. Every job is validated before any write.
    """
    args_list = item.get("args")
    if type(args_list) is not list or any(type(args) is not list for args in args_list):
        raise TypeError('push_bulk needs "args" as a list of argument lists, e.g. [[1], [2]]')
    if not 1 <= batch_size <= 10_000:
        raise ValueError("batch_size must be between 1 and 10,000")
    at = item.get("at")
    if isinstance(at, list) and len(at) != len(args_list):
        raise ValueError(f'"at" has {len(at)} times for {len(args_list)} jobs')
    job_class = _job_class_for(item, job_class)
    connection = get_redis()
    template = {key: value for key, value in item.items() if key not in ("args", "at", "jid")}
    check_json_native(template.get("kwargs", {}), "kwargs")
    timestamp = now()
    jids: list[str | None] = []
    ready: list[_Prepared] = []
    finals: list[tuple[type[Job] | None, Item]] = []
    if interceptor is None and not any(each.wants(job_class, template) for each in client_chain().instances()):
        ready = _prepare_plain_bulk(template, args_list, at, timestamp)
        return _write_bulk(connection, ready, batch_size)
    for index, args in enumerate(args_list):
        job_item = dict(template)
        job_item["args"] = args
        job_at = at[index] if isinstance(at, list) else at
        if job_at is not None:
            job_item["at"] = job_at
        try:
            prepared = _prepare(job_item, job_class, connection, timestamp)
        except TypeError as exc:
            raise TypeError(f"job {index} of the bulk push: {exc}") from None
        if prepared is None:
            jids.append(None)
            continue
        entry, final_item = prepared
        jids.append(entry.jid)
        ready.append(entry)
        finals.append((job_class, final_item if entry.at is None else {**final_item, "at": entry.at}))
    if interceptor is not None:
        for final_class, final_item in finals:
            interceptor(final_class, final_item)
        return jids
    _write_bulk(connection, ready, batch_size)
    return jids


_ARGS_MARK = "\x00jobsapp:args\x00"
_JID_MARK = "\x00jobsapp:jid\x00"


def _splice_template(job: Item) -> tuple[str, str, str, bool] | None:
    """Encode ``job`` once with markers for args and jid; returns the three literal pieces around
    them and whether args comes first, or None if the markers cannot be placed unambiguously."""
    encoded = JSON_ENCODER.encode({**job, "args": _ARGS_MARK, "jid": _JID_MARK})
    args_mark, jid_mark = JSON_ENCODER.encode(_ARGS_MARK), JSON_ENCODER.encode(_JID_MARK)
    if encoded.count(args_mark) != 1 or encoded.count(jid_mark) != 1:
        return None
    args_first = encoded.index(args_mark) < encoded.index(jid_mark)
    first, second = (args_mark, jid_mark) if args_first else (jid_mark, args_mark)
    head, rest = encoded.split(first)
    middle, tail = rest.split(second)
    return head, middle, tail, args_first


def _prepare_plain_bulk(template: Item, args_list: list[list[Any]], at: Any, timestamp: float) -> list[_Prepared]:
    """The bulk path when no client middleware can change items: the options are normalized,
    validated and encoded once; each job only gets its args checked and encoded and a jid."""
    ordered = {"class": template.get("class"), "args": [], **{key: value for key, value in template.items() if key != "class"}}
    base = normalize_item(ordered, timestamp=timestamp)
    immediate = _splice_template({**base, "enqueued_at": timestamp})
    scheduled = _splice_template(base)
    jid_hex = os.urandom(12 * len(args_list)).hex()
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    queue = base["queue"]
    prepared: list[_Prepared] = []
    for index, args in enumerate(args_list):
        try:
            check_json_native(args, "args")
        except TypeError as exc:
            raise TypeError(f"job {index} of the bulk push: {exc}") from None
        job_at = at[index] if isinstance(at, list) else at
        if job_at is not None and (isinstance(job_at, bool) or not isinstance(job_at, (int, float))):
            raise TypeError(f'job {index} of the bulk push: "at" must be epoch seconds, not {job_at!r}')
        jid = jid_hex[index * 24 : index * 24 + 24]
        scheduled_at = float(job_at) if job_at is not None and float(job_at) > timestamp else None
        pieces = immediate if scheduled_at is None else scheduled
        if pieces is None:
            job = {**base, "args": args, "jid": jid}
            if scheduled_at is None:
                job["enqueued_at"] = timestamp
            text = JSON_ENCODER.encode(job)
        else:
            head, middle, tail, args_first = pieces
            args_text = JSON_ENCODER.encode(args)
            jid_text = f'"{jid}"'
            text = head + args_text + middle + jid_text + tail if args_first else head + jid_text + middle + args_text + tail
        data = text.encode("utf-8")
        if limit and len(data) > limit:
            encode({**base, "args": args, "jid": jid})  # raises PayloadTooLarge with the full message
        prepared.append(_Prepared(jid, queue, scheduled_at, data))
    return prepared


def _write_bulk(connection: redis.Redis, ready: list[_Prepared], batch_size: int) -> list[str | None]:
    written = 0
    try:
        for start in range(0, len(ready), batch_size):
            batch = ready[start : start + batch_size]
            _write(connection, batch)
            written += len(batch)
    except CONNECTION_ERRORS as exc:
        error = unavailable(exc)
        error.args = (f"{error.args[0]} ({written} of {len(ready)} jobs were written before the failure)",)
        raise error from exc
    return [entry.jid for entry in ready]
