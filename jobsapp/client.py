"""The producing side: turn items into Redis writes, exactly as Sidekiq's client does.

``push(item)`` and ``push_bulk(item)`` take Sidekiq items (``{"class": "HardWorker", "args": [...]}``),
so Python can enqueue for Ruby workers; ``Job.perform_*`` call them. Each item is normalized
(jid, created_at, option defaults), passed through the client middleware chain (which may stop it),
its feature options validated and stamped by their rules (``jobsapp.options``), and encoded.
Only then is anything written, so bad input raises and writes nothing:

- immediate jobs: ``SADD queues <q>`` and ``LPUSH queue:<q> <json with enqueued_at>``;
- scheduled jobs (``at`` in the future): ``ZADD schedule <at> <json without at/enqueued_at>``.

Each push goes to the Redis of the shard its class or queue is routed to (``jobsapp.shards``;
one shard, "default", without ``JOBSAPP["SHARDS"]``). With ``ENQUEUE_REPLICAS = N`` the write's
pipeline ends with ``WAIT N <timeout>``: the push returns only once N replicas have it, and
raises ReplicationTimeout (the job is enqueued, just not yet safe from a failover) otherwise.

A bulk push prepares every item first, then writes ``batch_size`` jobs per pipeline (one round
trip), one ``LPUSH`` per queue per batch.

Where to look: ``_prepare`` turns one item into a ``_Prepared`` (its bytes, queue, run-at time
and what its features write with it); ``_prepare_plain_bulk`` does it for a bulk push no
middleware or feature can change (the options encoded once, each job's args and jid spliced in).
Writing has one entry, ``_write``: one plain job goes out as ``_write_plain`` (two commands, no
pipeline object); anything else is queued by ``_queue_writes`` (batch counts, result records,
then the pushes) on one pipeline whose replies ``_Written`` reads back (a partial failure's
count, the unique pushes refused), with ``_check_replicas`` for ``ENQUEUE_REPLICAS``.
``_write_bulk`` calls ``_write`` once per ``batch_size`` slice. A refused connection, or Redis refusing writes (OOM at
``maxmemory``, READONLY after a failover, MISCONF), raises RedisUnavailable with the reason; a
bulk push that fails midway may have written earlier batches, or part of the failing one (their
jids were returned to no one, so the exception says how many were written).
"""

from __future__ import annotations

import itertools
import os
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import redis

from . import batch as job_batch
from . import keys, options, registry, results, scripts, shards, unique
from .chains import client_chain, run_client_chain
from .conf import jobs_settings
from .connection import (
    CONNECTION_ERRORS,
    cluster_mode,
    describe,
    follow_sentinel_master,
    get_redis,
    is_cluster,
    node_client,
    read_slot_map_again,
    refuses_writes,
    unavailable,
)
from .errors import ReplicationTimeout
from .lean_redis import LeanRedis
from .payload import Item, check_json_native, compact_json, encode, new_jid, normalize_item, now
from .registry import JobClass, JobTemplate, job_template

#: The producer's public surface for layers built on the engine (``tracking``: docs/architecture.md):
#: they reach these through ``jobsapp.client``, never ``jobsapp.payload`` or ``jobsapp.registry``.
__all__ = ["Item", "JobTemplate", "check_json_native", "job_template", "new_jid", "push", "push_bulk"]


#: Set by jobsapp.testing: receives (job_class, item) instead of Redis, returns False for a
#: push it refuses (a unique job already queued). None in production.
interceptor: Callable[[type[JobClass] | None, Item], bool | None] | None = None


class _Prepared:
    __slots__ = ("at", "batch", "data", "jid", "priority", "queue", "record", "unique_lock")

    def __init__(self, jid: str, queue: str, at: float | None, data: bytes) -> None:
        self.jid = jid
        self.queue = queue
        self.at = at
        self.data = data
        # (fields, retain seconds) of the job's first result record, for sidekiq_options(retain=...)
        self.record: tuple[dict[str, str], float] | None = None
        # (lock key, TTL ms) for sidekiq_options(unique_for=...): taken with the push, or refused
        self.unique_lock: tuple[str, int] | None = None
        # the batch (jobsapp.batch) whose jobs() block this push runs in: counted with the push
        self.batch: str | None = None
        # sidekiq_options(priority=...): pushed to the queue's priority ZSET (jobsapp.priority)
        self.priority: int | None = None


def _job_class_for(item: Item, job_class: type[JobClass] | None) -> type[JobClass] | None:
    if job_class is not None:
        return job_class
    name = item.get("class")
    return registry.lookup(name) if isinstance(name, str) and registry.is_registered(name) else None


def _prepare(item: Item, job_class: type[JobClass] | None, connection: redis.Redis, timestamp: float) -> tuple[_Prepared, Item] | None:
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
    plan = options.stamp(result, scheduled_at=scheduled_at, timestamp=timestamp)  # ValueError: nothing written
    bid = job_batch.current()
    if bid is not None:
        result[job_batch.BATCH_KEY] = bid
    prepared = _Prepared(result["jid"], result["queue"], scheduled_at, encode(result))
    prepared.unique_lock = plan.unique_lock
    prepared.batch = bid
    prepared.priority = plan.priority
    if plan.retain_seconds is not None:
        prepared.record = (results.pushed_fields(result, scheduled_at=scheduled_at), plan.retain_seconds)
    return prepared, result


def _shard_of(item: Item, job_class: type[JobClass] | None) -> str:
    """The shard settings route this item to (by its class's wire name, then its queue)."""
    queue = item.get("queue") or (job_class.sidekiq_options_hash.get("queue") if job_class is not None else None)
    return shards.route(item.get("class"), queue or jobs_settings.DEFAULT_QUEUE)


def _write_plain(connection: redis.Redis, entry: _Prepared) -> None:
    """Write one job with no unique lock, batch, result record or replicas to wait for (``_is_plain``):
    the same commands as ``_queue_writes`` (``SADD`` + ``LPUSH``, or ``ZADD``), sent in one write
    without building a pipeline (the push a web request makes most: ~12 us of CPU less)."""
    follow_sentinel_master(at_most_every_seconds=1.0)  # as _write
    if entry.at is None:
        commands: tuple[tuple[Any, ...], ...] = (("SADD", keys.QUEUES, entry.queue), ("LPUSH", keys.queue(entry.queue), entry.data))
    else:
        commands = (("ZADD", keys.SCHEDULE, entry.at, entry.data),)
    if isinstance(connection, LeanRedis):
        replies = connection.execute_commands(*commands)
    else:
        pipe = connection.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies = pipe.execute(raise_on_error=False)
    errors = [reply for reply in replies if isinstance(reply, Exception)]
    if errors:  # an error reply (OOM, READONLY, ...): was the job written anyway?
        pushed = replies[-1]
        raise _WriteRefused(errors[0], written=0 if isinstance(pushed, Exception) or not int(pushed) else 1)


def _is_plain(entry: _Prepared, shard: str) -> bool:
    """Whether ``entry`` needs nothing but its own push: no unique lock, batch, result record, or
    replicas to wait for."""
    return (
        entry.unique_lock is None
        and entry.batch is None
        and entry.record is None
        and entry.priority is None
        and not shards.setting(shard, "ENQUEUE_REPLICAS")
    )


def _spreads(entry: _Prepared) -> bool:
    """Whether ``entry`` may go to any partition of a cluster: an immediate push whose features
    write nothing else (a unique lock, a batch count, a result record and a priority are written
    in one script or transaction with the push, and live on partition 0)."""
    return entry.at is None and entry.unique_lock is None and entry.batch is None and entry.record is None and entry.priority is None


#: The partition the next spread push of this process goes to (modulo the partition count).
_spread_turn = itertools.count(random.randrange(1 << 16))


def _partitioned(connection: redis.Redis, prepared: list[_Prepared]) -> list[tuple[int, list[_Prepared]]]:
    """``prepared`` cut into ``(partition, jobs)`` writes: everything on partition 0 outside a
    partitioned cluster; else the jobs that spread in equal runs, one per partition from this
    process's next turn on (a single push takes the next partition), the others on partition 0."""
    if not is_cluster(connection):  # a type check: a standalone push pays nothing more
        return [(0, prepared)]
    count = keys.partition_count()
    if count == 1:
        return [(0, prepared)]
    spread = [entry for entry in prepared if _spreads(entry)]
    home = [entry for entry in prepared if not _spreads(entry)] if len(spread) < len(prepared) else []
    writes: list[tuple[int, list[_Prepared]]] = [(0, home)] if home else []
    runs = min(count, len(spread))
    for run in range(runs):
        part = spread[run * len(spread) // runs : (run + 1) * len(spread) // runs]
        writes.append((next(_spread_turn) % count, part))
    return writes


def _write(connection: redis.Redis, prepared: list[_Prepared], *, shard: str = shards.DEFAULT) -> set[str]:
    """Write the jobs, one round trip per partition written (one outside a partitioned cluster:
    ``_partitioned``); the jids of unique jobs refused because their lock is held."""
    writes = _partitioned(connection, prepared)
    if len(writes) == 1 and writes[0][0] == 0:
        return _write_partition(connection, prepared, shard=shard)
    refused: set[str] = set()
    written = 0
    for index, entries in writes:
        with keys.using_partition(index):
            try:
                refused |= _write_partition(connection, entries, shard=shard)
            except _WriteRefused as failure:
                failure.written += written
                raise
        written += len(entries)
    return refused


def _write_partition(connection: redis.Redis, prepared: list[_Prepared], *, shard: str = shards.DEFAULT) -> set[str]:
    """Write the jobs in one round trip; the jids of unique jobs refused because their lock is held.

    One plain job goes through ``_write_plain`` (no pipeline object). Any other list is queued on
    one pipeline by ``_queue_writes`` (a MULTI when a batch counts the jobs, so they are counted
    before they can run), followed by ``WAIT`` when the shard asks for replicas; the replies are
    then read back through the ``_Written`` layout it returned. Raises ``_WriteRefused`` on an
    error reply, ReplicationTimeout when too few replicas confirmed."""
    if len(prepared) == 1 and _is_plain(prepared[0], shard):
        _write_plain(connection, prepared[0])
        return set()
    follow_sentinel_master(at_most_every_seconds=1.0)  # so a partitioned old master is left within a second
    replicas_required = int(shards.setting(shard, "ENQUEUE_REPLICAS") or 0)
    # WAIT counts the replicas that have this connection's writes: on a cluster, the writes and
    # their WAIT go on one connection to the master serving this partition's slot
    on_master = node_client(connection, keys.QUEUES) if replicas_required and is_cluster(connection) else connection
    pipe = on_master.pipeline(transaction=any(entry.batch is not None for entry in prepared))
    written = _queue_writes(pipe, prepared)
    if replicas_required:
        timeout_seconds = float(shards.setting(shard, "ENQUEUE_REPLICAS_TIMEOUT_SECONDS"))
        pipe.wait(replicas_required, max(1, int(timeout_seconds * 1000)))
    try:
        replies = pipe.execute(raise_on_error=False)
    except CONNECTION_ERRORS:
        if on_master is not connection:  # a master gone: the cluster client learns its successor
            read_slot_map_again(connection)
        raise
    if on_master is not connection and any(isinstance(reply, redis.exceptions.AskError) for reply in replies):
        read_slot_map_again(connection)  # the slot moved (MOVED is an AskError): the next push goes to its master
    written.raise_for_errors(replies)
    if replicas_required:
        _check_replicas(on_master, int(replies[-1]), replicas_required, jids=[entry.jid for entry in prepared], shard=shard)
    return written.refused_unique(connection, replies)


class _Written:
    """Where a pipeline of pushes answers: which replies count jobs written (for a partial
    failure), and which are the unique pushes (refused when their lock is held)."""

    __slots__ = ("pushes", "unique_entries", "unique_from")

    def __init__(self) -> None:
        self.pushes: list[tuple[int, int]] = []  # (reply index, jobs that command writes)
        self.unique_entries: list[_Prepared] = []
        self.unique_from = 0  # the reply index of the first unique push

    def raise_for_errors(self, replies: list[Any]) -> None:
        """An error reply (OOM, READONLY, ...): ``_WriteRefused`` saying how many jobs the
        pipeline still wrote."""
        errors = [reply for reply in replies if isinstance(reply, Exception)]
        if errors:
            written = sum(jobs for index, jobs in self.pushes if not isinstance(replies[index], Exception) and int(replies[index]))
            raise _WriteRefused(errors[0], written=written)

    def refused_unique(self, connection: redis.Redis, replies: list[Any]) -> set[str]:
        """The jids of the unique pushes refused (their lock is held); a refused job counted in a
        batch with its push is withdrawn from it."""
        if not self.unique_entries:
            return set()
        pushed = replies[self.unique_from : self.unique_from + len(self.unique_entries)]
        entries = self.unique_entries
        refused = {entry.jid for entry, reply in zip(entries, pushed, strict=True) if not scripts.unique_push_reply(reply)}
        for entry in entries:
            if entry.batch is not None and entry.jid in refused:  # counted in its batch, never pushed
                job_batch.withdraw(connection, entry.batch)
        return refused


def _queue_writes(pipe: redis.client.Pipeline, prepared: list[_Prepared]) -> _Written:
    """Queue every write of these jobs on ``pipe``, in the order that keeps a worker from seeing
    a job before its bookkeeping: batch counts, result records, then the pushes (one ``LPUSH`` per
    queue, one ``ZADD`` for the scheduled, one ``unique_push.lua`` per unique job)."""
    written = _Written()
    batched: dict[str, int] = {}
    for entry in prepared:
        if entry.batch is not None:
            batched[entry.batch] = batched.get(entry.batch, 0) + 1
    for bid, count in batched.items():
        job_batch.count_pushed(pipe, bid, count)
    for entry in prepared:
        # before the push: a worker never sees a job without its record (a unique job's record is
        # first written when it starts: its push may be refused)
        if entry.record is not None and entry.unique_lock is None:
            fields, retain = entry.record
            results.add_pushed(pipe, entry.jid, fields, retain=retain, scheduled_at=entry.at)
    by_queue: dict[str, list[bytes]] = defaultdict(list)
    scheduled: dict[bytes, float] = {}
    ranked: list[_Prepared] = []
    for entry in prepared:
        if entry.unique_lock is not None:
            written.unique_entries.append(entry)
        elif entry.at is None and entry.priority is not None:
            ranked.append(entry)
        elif entry.at is None:
            by_queue[entry.queue].append(entry.data)
        else:
            scheduled[entry.data] = entry.at
    if by_queue:
        pipe.sadd(keys.QUEUES, *by_queue)
        for queue, payloads in by_queue.items():
            written.pushes.append((len(pipe), len(payloads)))
            pipe.lpush(keys.queue(queue), *payloads)
    for entry in ranked:  # in push order: FIFO within one priority
        if entry.priority is not None:  # always: that is how it got into ranked
            written.pushes.append((len(pipe), 1))
            scripts.priority_push(pipe, queue=entry.queue, level=entry.priority, data=entry.data)
    if scheduled:
        written.pushes.append((len(pipe), len(scheduled)))
        pipe.zadd(keys.SCHEDULE, scheduled)
    written.unique_from = len(pipe)
    for entry in written.unique_entries:
        lock = entry.unique_lock
        if lock is not None:  # always: that is how it got into unique_entries
            written.pushes.append((len(pipe), 1))
            unique.push_in(pipe, lock, jid=entry.jid, data=entry.data, queue=entry.queue, at=entry.at)
    return written


def _address_of(client: redis.Redis) -> str:
    """``host:port`` a plain client connects to (a cluster master's ``node_client``)."""
    options = client.connection_pool.connection_kwargs
    return f"{options.get('host', '?')}:{options.get('port', '?')}"


def _check_replicas(connection: redis.Redis, acknowledged: int, required: int, *, jids: list[str], shard: str) -> None:
    """ReplicationTimeout when fewer than ``required`` replicas confirmed the write (``WAIT``);
    ``connection`` is the client that sent it (on a cluster, the master's ``node_client``)."""
    if acknowledged >= required:
        return
    # A master its replicas no longer follow may be one Sentinel has replaced (after a
    # partition): drop the idle connections, so the next push asks again where the master is.
    connection.connection_pool.disconnect(inuse_connections=False)
    timeout_seconds = float(shards.setting(shard, "ENQUEUE_REPLICAS_TIMEOUT_SECONDS"))
    where = describe(shard)
    if cluster_mode(shard):
        where = f"{_address_of(connection)} ({where})"
    raise ReplicationTimeout(
        f"{len(jids)} job(s) written to the master at {where}, but {acknowledged} of the "
        f"{required} replicas required by ENQUEUE_REPLICAS confirmed within {timeout_seconds:g} s: "
        "they are enqueued, and would be lost only if the master died now",
        jids=jids,
        replicas_acknowledged=acknowledged,
        replicas_required=required,
    )


class _WriteRefused(Exception):  # internal: always turned into the error the caller sees
    """Redis answered a push pipeline with an error reply; ``written`` jobs were written anyway."""

    def __init__(self, error: Exception, *, written: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.written = written


def _refused(refused: _WriteRefused, *, shard: str, total: int, written_before: int = 0) -> Exception:
    """The error a producer sees for a refused write: RedisUnavailable when Redis refuses writes
    for now (OOM, READONLY, MISCONF: the web answers 503), else Redis's own error; both say how
    many jobs were written."""
    written = written_before + refused.written
    note = f"{written} of {total} jobs were written before the failure"
    if refuses_writes(refused.error):
        error: Exception = unavailable(refused.error, shard=shard)
        if total > 1:
            error.args = (f"{error.args[0]} ({note})",)
        return error
    refused.error.add_note(note)
    return refused.error


def push(item: Item, *, job_class: type[JobClass] | None = None) -> str | None:
    """Enqueue one Sidekiq item; returns its jid, or None when a client middleware stopped it."""
    job_class = _job_class_for(item, job_class)
    shard = _shard_of(item, job_class)
    connection = get_redis(shard)
    prepared = _prepare(item, job_class, connection, now())
    if prepared is None:
        return None
    entry, final_item = prepared
    if interceptor is not None:
        accepted = interceptor(job_class, final_item if entry.at is None else {**final_item, "at": entry.at})
        return None if accepted is False else entry.jid
    try:
        refused = _write(connection, [entry], shard=shard)
    except CONNECTION_ERRORS as exc:
        raise unavailable(exc, shard=shard) from exc
    except _WriteRefused as failure:
        raise _refused(failure, shard=shard, total=1) from failure.error
    except redis.ResponseError as exc:  # refused before the pipeline ran (MISCONF on connecting)
        if refuses_writes(exc):
            raise unavailable(exc, shard=shard) from exc
        raise
    return None if refused else entry.jid


def push_bulk(item: Item, *, batch_size: int = 1000, job_class: type[JobClass] | None = None) -> list[str | None]:
    """Enqueue one job per element of ``item["args"]`` (a list of argument lists).

    ``item["at"]`` may be one time for all or a list with one per job; ``item["jid"]`` may be a list
    of jids chosen up front (a push deferred to a commit returns them before it happens). Returns
    the jids in order, None where a client middleware stopped that job. Every job is validated
    before any write.
    """
    args_list = item.get("args")
    if type(args_list) is not list or any(type(args) is not list for args in args_list):
        raise TypeError('push_bulk needs "args" as a list of argument lists, e.g. [[1], [2]]')
    if not 1 <= batch_size <= 10_000:
        raise ValueError("batch_size must be between 1 and 10,000")
    at = item.get("at")
    if isinstance(at, list) and len(at) != len(args_list):
        raise ValueError(f'"at" has {len(at)} times for {len(args_list)} jobs')
    chosen_jids = item.get("jid")
    if chosen_jids is not None and (
        not isinstance(chosen_jids, list)
        or len(chosen_jids) != len(args_list)
        or not all(isinstance(jid, str) and jid.isascii() and jid.isalnum() for jid in chosen_jids)
    ):
        raise ValueError(f'push_bulk takes "jid" as a list of one jid per job, not {chosen_jids!r}')
    job_class = _job_class_for(item, job_class)
    shard = _shard_of(item, job_class)
    connection = get_redis(shard)
    template = {key: value for key, value in item.items() if key not in ("args", "at", "jid")}
    check_json_native(template.get("kwargs", {}), "kwargs")
    timestamp = now()
    jids: list[str | None] = []
    ready: list[_Prepared] = []
    finals: list[tuple[type[JobClass] | None, Item]] = []
    plain = (
        job_batch.current() is None
        and options.UNIQUE_FOR_KEY not in template
        and options.EXPIRES_IN_KEY not in template  # each job's expires_at follows its own run-at time
        and options.PRIORITY_KEY not in template  # a prioritised job goes through priority_push.lua
        and not (job_class is not None and options.PRIORITY_KEY in job_class.sidekiq_options_hash)
        and not (job_class is not None and options.UNIQUE_FOR_KEY in job_class.sidekiq_options_hash)
    )
    if interceptor is None and plain and not any(each.wants(job_class, template) for each in client_chain().instances()):
        ready = _prepare_plain_bulk(template, args_list, at, timestamp, jids=chosen_jids)
        return _write_bulk(connection, ready, batch_size, shard=shard)
    for index, args in enumerate(args_list):
        job_item = dict(template)
        job_item["args"] = args
        if chosen_jids is not None:
            job_item["jid"] = chosen_jids[index]
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
        refused_jids = {str(final_item["jid"]) for final_class, final_item in finals if interceptor(final_class, final_item) is False}
        return [None if jid in refused_jids else jid for jid in jids]
    written = _write_bulk(connection, ready, batch_size, shard=shard)
    refused = {entry.jid for entry, jid in zip(ready, written, strict=True) if jid is None}
    return [None if jid in refused else jid for jid in jids]


_ARGS_MARK = "\x00jobsapp:args\x00"
_JID_MARK = "\x00jobsapp:jid\x00"


def _splice_template(job: Item) -> tuple[str, str, str, bool] | None:
    """Encode ``job`` once with markers for args and jid; returns the three literal pieces around
    them and whether args comes first, or None if the markers cannot be placed unambiguously."""
    encoded = compact_json({**job, "args": _ARGS_MARK, "jid": _JID_MARK})
    args_mark, jid_mark = compact_json(_ARGS_MARK), compact_json(_JID_MARK)
    if encoded.count(args_mark) != 1 or encoded.count(jid_mark) != 1:
        return None
    args_first = encoded.index(args_mark) < encoded.index(jid_mark)
    first, second = (args_mark, jid_mark) if args_first else (jid_mark, args_mark)
    head, rest = encoded.split(first)
    middle, tail = rest.split(second)
    return head, middle, tail, args_first


def _prepare_plain_bulk(
    template: Item, args_list: list[list[Any]], at: Any, timestamp: float, *, jids: list[str] | None = None
) -> list[_Prepared]:
    """The bulk path when no client middleware can change items: the options are normalized,
    validated and encoded once; each job only gets its args checked and encoded and a jid."""
    ordered = {"class": template.get("class"), "args": [], **{key: value for key, value in template.items() if key != "class"}}
    base = normalize_item(ordered, timestamp=timestamp)
    immediate = _splice_template({**base, "enqueued_at": timestamp})
    scheduled = _splice_template(base)
    jid_hex = "" if jids is not None else os.urandom(12 * len(args_list)).hex()
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    queue = base["queue"]
    retain = options.stamp(dict(base), scheduled_at=None, timestamp=timestamp).retain_seconds  # ValueError: nothing written
    prepared: list[_Prepared] = []
    for index, args in enumerate(args_list):
        try:
            check_json_native(args, "args")
        except TypeError as exc:
            raise TypeError(f"job {index} of the bulk push: {exc}") from None
        job_at = at[index] if isinstance(at, list) else at
        if job_at is not None and (isinstance(job_at, bool) or not isinstance(job_at, (int, float))):
            raise TypeError(f'job {index} of the bulk push: "at" must be epoch seconds, not {job_at!r}')
        jid = str(jids[index]) if jids is not None else jid_hex[index * 24 : index * 24 + 24]
        scheduled_at = float(job_at) if job_at is not None and float(job_at) > timestamp else None
        pieces = immediate if scheduled_at is None else scheduled
        if pieces is None:
            job = {**base, "args": args, "jid": jid}
            if scheduled_at is None:
                job["enqueued_at"] = timestamp
            text = compact_json(job)
        else:
            head, middle, tail, args_first = pieces
            args_text = compact_json(args)
            jid_text = f'"{jid}"'
            text = head + args_text + middle + jid_text + tail if args_first else head + jid_text + middle + args_text + tail
        data = text.encode("utf-8")
        if limit and len(data) > limit:
            encode({**base, "args": args, "jid": jid})  # raises PayloadTooLarge with the full message
        entry = _Prepared(jid, queue, scheduled_at, data)
        if retain is not None:
            entry.record = (
                results.pushed_fields(
                    {**base, "args": args, "jid": jid, **({} if scheduled_at else {"enqueued_at": timestamp})}, scheduled_at=scheduled_at
                ),
                retain,
            )
        prepared.append(entry)
    return prepared


def _write_bulk(connection: redis.Redis, ready: list[_Prepared], batch_size: int, *, shard: str) -> list[str | None]:
    written = 0
    refused: set[str] = set()
    try:
        for start in range(0, len(ready), batch_size):
            batch = ready[start : start + batch_size]
            refused |= _write(connection, batch, shard=shard)
            written += len(batch)
    except CONNECTION_ERRORS as exc:
        error = unavailable(exc, shard=shard)
        error.args = (f"{error.args[0]} ({written} of {len(ready)} jobs were written before the failure)",)
        raise error from exc
    except _WriteRefused as failure:
        raise _refused(failure, shard=shard, total=len(ready), written_before=written) from failure.error
    except redis.ResponseError as exc:  # refused before a pipeline ran (MISCONF on connecting)
        if not refuses_writes(exc):
            raise
        error = unavailable(exc, shard=shard)
        error.args = (f"{error.args[0]} ({written} of {len(ready)} jobs were written before the failure)",)
        raise error from exc
    return [None if entry.jid in refused else entry.jid for entry in ready]
