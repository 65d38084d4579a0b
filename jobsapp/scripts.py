"""Loads the Lua scripts in ``jobsapp/lua/`` once, by name, and runs them with EVALSHA.

Each ``lua/<verb>.lua`` is one atomic operation whose header documents KEYS, ARGV, the return
value and the cost. ``script("fetch")`` returns a runner bound to nothing: pass the client (or a
pipeline) on each call, so the same runner serves every thread, the fetcher's blocking connection
and pipelines alike. A NOSCRIPT reply (a restarted or flushed server) reloads the script
transparently; redis-py's Script object does that for us.

Below the loader, one keyword-only function per script, same name as its file: the only place
that turns arguments into KEYS and ARGV (in the order of the script's header), with key names
from ``keys.py``. A wrong ARGV order writes wrong bytes and Redis does not complain, so no other
module builds them. Each also owns the other direction: it parses what its script returns into a
typed value (a bool, a count, a named tuple), so no caller indexes into a raw reply. A script
queued on a pipeline (whose reply arrives with the pipeline's) has a ``*_reply`` parser beside it.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import redis
from redis.cluster import ClusterPipeline
from redis.commands.core import Script

from . import keys, priority

LUA_DIRECTORY = Path(__file__).resolve().parent / "lua"

_lock = threading.Lock()


@cache
def source(name: str) -> str:
    path = LUA_DIRECTORY / f"{name}.lua"
    if not path.is_file():
        raise LookupError(f"no Lua script {name!r} in {LUA_DIRECTORY}")
    return path.read_text(encoding="utf-8")


class Runner:
    """One script; call it with a client or pipeline, keys and args."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = source(name)
        # Bytes source: the sha is computed without a client, so one object serves every
        # client and pipeline; NOSCRIPT (a restarted server) makes redis-py load it again.
        self._script = Script(None, self.source.encode("utf-8"))  # type: ignore[arg-type]

    def __call__(self, client: redis.Redis | redis.client.Pipeline, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        if isinstance(client, ClusterPipeline):
            # redis-py's cluster pipeline refuses EVALSHA (and could not reload a script a node
            # lost inside it): the source goes along, once per call, which only pipelined calls pay
            return client.execute_command("EVAL", self.source, len(keys), *keys, *args)
        return self._script(keys=list(keys), args=list(args), client=client)


_runners: dict[str, Runner] = {}


def script(name: str) -> Runner:
    """The runner for ``lua/<name>.lua`` (loaded once per process)."""
    runner = _runners.get(name)
    if runner is None:
        with _lock:
            runner = _runners.setdefault(name, Runner(name))
    return runner


def preload() -> None:
    """Read and hash every script now (a ``-P`` parent before it forks: its children share them)."""
    for path in sorted(LUA_DIRECTORY.glob("*.lua")):
        script(path.stem)


def retry(
    client: redis.Redis,
    *,
    inflight_key: str,
    target_set: str,
    raw: bytes,
    score: float,
    member: str | bytes,
    jid: str,
    dead_cutoff: str = "",
    dead_max_jobs: int = 0,
) -> bool:
    """``retry.lua``: file a failed job in ``target_set`` (``keys.RETRY`` or ``keys.DEAD``, trimmed
    by ``dead_cutoff``/``dead_max_jobs``) and un-flight it; whether it was filed (False: no longer
    in flight, nothing written)."""
    reply = script("retry")(
        client, [inflight_key or keys.absent(), target_set, keys.RECOVERIES], [raw, repr(score), member, jid, dead_cutoff, dead_max_jobs]
    )
    return bool(int(reply))


def recover_requeue(client: redis.Redis, *, inflight_key: str, raw: bytes, queue: str, jid: str, marked: bytes, blamed: bool) -> int:
    """``recover_requeue.lua``: a dead process's in-flight job back on ``queue`` (``marked`` pushed
    instead of ``raw`` when not empty); the recovery count, or 0 when it was gone."""
    level = priority.of_raw(raw)
    reply = script("recover_requeue")(
        client,
        [inflight_key, _target(queue, level), keys.QUEUES, keys.RECOVERIES, keys.PRIORITISED, keys.PRIORITY_SEQUENCE],
        [raw, queue, jid, marked, 1 if blamed else 0, _rank(level)],
    )
    return int(reply)


def recover_bury(
    client: redis.Redis, *, inflight_key: str, raw: bytes, member: str, jid: str, died_at: float, dead_cutoff: str, dead_max_jobs: int
) -> bool:
    """``recover_bury.lua``: a dead process's in-flight job into the dead set as ``member``; whether
    it was buried (False: it was gone, nothing written)."""
    reply = script("recover_bury")(
        client, [inflight_key, keys.DEAD, keys.RECOVERIES], [raw, member, jid, repr(died_at), dead_cutoff, dead_max_jobs]
    )
    return int(reply) != 0


def schedule_move(client: redis.Redis, *, set_key: str, moves: Sequence[tuple[bytes, str, bytes | str]]) -> int:
    """``schedule_move.lua``: move due ``(member, queue, payload)`` entries of ``set_key``
    (``keys.SCHEDULE`` or ``keys.RETRY``) to their queues; how many this call moved."""
    levels = [priority.of_raw(payload) for _, _, payload in moves]
    reply = script("schedule_move")(
        client,
        [
            set_key,
            keys.QUEUES,
            *[_target(queue, level) for (_, queue, _), level in zip(moves, levels, strict=True)],
            keys.PRIORITISED,
            keys.PRIORITY_SEQUENCE,
        ],
        [
            len(moves),
            *[member for member, _, _ in moves],
            *[payload for _, _, payload in moves],
            *[queue for _, queue, _ in moves],
            *[_rank(level) for level in levels],
        ],
    )
    return int(reply)


def unique_push(
    pipe: redis.client.Pipeline, *, lock_key: str, ttl_ms: int, jid: str, data: bytes | str, queue: str, at: float | None
) -> None:
    """``unique_push.lua``, queued on ``pipe``: take a unique job's lock and push it (to
    ``schedule`` when ``at`` is given, else to ``queue``); its reply is ``unique_push_reply``'s."""
    target = keys.SCHEDULE if at is not None else keys.queue(queue)
    script("unique_push")(
        pipe, [lock_key, keys.QUEUES, target], [jid, ttl_ms, data, "" if at is not None else queue, "" if at is None else repr(at)]
    )


def unique_push_reply(reply: Any) -> bool:
    """Whether ``unique_push.lua`` pushed the job (False: refused, another holds the lock)."""
    return bool(int(reply))


def unique_release(client: redis.Redis, *, digest: str, jid: str) -> bool:
    """``unique_release.lua``: drop the unique lock ``digest`` if ``jid`` holds it; whether it did."""
    return bool(int(script("unique_release")(client, [keys.unique_lock(digest)], [jid])))


def relay_lock(client: redis.Redis, *, token: str, ttl_seconds: float) -> bool:
    """``relay_lock.lua``: take or renew the outbox relay's lock for ``token``; whether it holds it."""
    return bool(int(script("relay_lock")(client, [keys.OUTBOX_RELAY_LOCK], [token, max(1, int(ttl_seconds * 1000))])))


def relay_unlock(client: redis.Redis, *, token: str) -> bool:
    """``relay_unlock.lua``: release the outbox relay's lock if ``token`` holds it; whether it did."""
    return bool(int(script("relay_unlock")(client, [keys.OUTBOX_RELAY_LOCK], [token])))


class Admission(NamedTuple):
    """A limiter script's reply: whether the slot (or the call) was granted, and ``value``: the
    server's time when granted, the seconds to wait before asking again when not."""

    granted: bool
    value: float


def _admission(reply: Any) -> Admission:
    granted, value = reply
    return Admission(bool(int(granted)), float(value))


def limiter_concurrent(
    client: redis.Redis, *, name: str, token: str, size: int, lock_timeout_seconds: float, permits_key: str
) -> Admission:
    """``limiter_concurrent.lua``: take one of ``size`` slots, recorded in ``permits_key`` (the
    holder's process)."""
    return _admission(
        script("limiter_concurrent")(client, [keys.limiter_holders(name), permits_key], [token, size, repr(lock_timeout_seconds), name])
    )


def limiter_window(client: redis.Redis, *, name: str, token: str, count: int, per_seconds: float) -> Admission:
    """``limiter_window.lua``: admit ``count`` per sliding ``per_seconds``."""
    return _admission(script("limiter_window")(client, [keys.limiter_holders(name)], [token, count, repr(per_seconds)]))


def limiter_bucket(client: redis.Redis, *, name: str, count: int, per_seconds: float) -> Admission:
    """``limiter_bucket.lua``: admit ``count`` per fixed ``per_seconds`` interval."""
    return _admission(script("limiter_bucket")(client, [keys.limiter(name)], [count, repr(per_seconds)]))


def api_move_to_queue(pipe: redis.client.Pipeline, *, set_key: str, member: bytes, queue: str, data: bytes | str) -> None:
    """``api_move_to_queue.lua``, queued on ``pipe``: move ``member`` of ``set_key`` to ``queue``
    as ``data`` (a prioritised job to its priority); its reply is ``moved_reply``'s."""
    level = priority.of_raw(data)
    script("api_move_to_queue")(
        pipe, [set_key, keys.QUEUES, _target(queue, level), keys.PRIORITISED, keys.PRIORITY_SEQUENCE], [member, queue, data, _rank(level)]
    )


def api_kill(pipe: redis.client.Pipeline, *, set_key: str, member: bytes, now: float, oldest_kept: float, dead_max_jobs: int) -> None:
    """``api_kill.lua``, queued on ``pipe``: move ``member`` of ``set_key`` to the dead set,
    trimmed; its reply is ``moved_reply``'s."""
    script("api_kill")(pipe, [set_key, keys.DEAD], [member, repr(now), repr(oldest_kept), dead_max_jobs])


def moved_reply(reply: Any) -> bool:
    """Whether ``api_move_to_queue.lua`` or ``api_kill.lua`` moved its member (False: it was gone)."""
    return bool(int(reply))


@dataclass(frozen=True)
class PeriodicClaim:
    """``periodic_claim.lua``'s reply: whether the job was pushed, the outcome ("enqueued",
    "early", "disabled", "done", "skipped") and the malformed ``jobsapp_last_tick`` it ignored
    ('' when the field was sound)."""

    pushed: bool
    outcome: str
    ignored_last_tick: str


def periodic_claim(
    client: redis.Redis,
    *,
    name: str,
    queue: str,
    level: int | None,
    tick: int,
    tick_before: int,
    tick_iso: str,
    tick_ruby: str,
    data: str,
    jid: str,
    missed: str,
    missed_after_seconds: int,
    jid_history_size: int,
) -> PeriodicClaim:
    """``periodic_claim.lua``: claim ``tick`` of periodic job ``name`` and push ``data`` to
    ``queue`` (at priority ``level``; None: to its list) for exactly one caller."""
    pushed, outcome, ignored = script("periodic_claim")(
        client,
        [
            keys.cron_job(name),
            keys.cron_job_enqueued(name),
            keys.cron_job_jid_history(name),
            keys.QUEUES,
            _target(queue, level),
            *_priority_keys(queue, level),
        ],
        [tick, tick_iso, data, queue, jid, missed, tick_before, jid_history_size, tick_ruby, missed_after_seconds, _rank(level)],
    )
    return PeriodicClaim(bool(int(pushed)), _text(outcome), _text(ignored))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class BatchUpdate(NamedTuple):
    """``batch_update.lua``'s reply: the jobs still pending (-1: no such batch) and the callbacks
    this call pushed (``"complete"``, ``"success"``)."""

    pending: int
    fired: frozenset[str]


def batch_update(
    client: redis.Redis,
    *,
    bid: str,
    event: str,
    jid: str,
    complete_queue: str,
    success_queue: str,
    complete_jid: str,
    success_jid: str,
    ttl_seconds: int,
    linger_seconds: int,
    complete_level: int | None = None,
    success_level: int | None = None,
    more_jids: Sequence[str] = (),
) -> BatchUpdate:
    """``batch_update.lua``: count ``event`` for batch ``bid`` (of ``jid``, and of ``more_jids``
    with the same outcome) and push its callbacks (to ``complete_queue`` / ``success_queue``, ''
    when none; at priority ``complete_level`` / ``success_level``, None for none) once; the keys
    live ``ttl_seconds`` after the update, ``linger_seconds`` once the batch is complete without
    failures."""
    complete_wake = keys.priority_wake(complete_queue) if complete_queue and complete_level is not None else keys.absent()
    success_wake = keys.priority_wake(success_queue) if success_queue and success_level is not None else keys.absent()
    prioritised = complete_level is not None or success_level is not None
    pending, fired = script("batch_update")(
        client,
        [
            keys.batch(bid),
            keys.batch_failed(bid),
            keys.QUEUES,
            _target(complete_queue, complete_level) if complete_queue else keys.absent(),
            _target(success_queue, success_level) if success_queue else keys.absent(),
            keys.batch_succeeded(bid),
            keys.PRIORITISED if prioritised else keys.absent(),
            keys.PRIORITY_SEQUENCE if prioritised else keys.absent(),
            complete_wake,
            success_wake,
        ],
        [
            event,
            jid,
            bid,
            complete_jid,
            success_jid,
            ttl_seconds,
            linger_seconds,
            _rank(complete_level),
            "" if complete_level is None else complete_level,
            _rank(success_level),
            "" if success_level is None else success_level,
            *more_jids,
        ],
    )
    return BatchUpdate(int(pending), frozenset(name for name in _text(fired).split(",") if name))


def result_write(
    client: redis.Redis,
    *,
    now: float,
    changes: Sequence[tuple[str, float, str, dict[str, str]]],
    ttl_max_seconds: int,
    max_records: int,
) -> int:
    """``result_write.lua``: apply ``(jid, ttl_seconds, kind, fields)`` record changes in order
    (kind: "start", "update" or "finish"), each TTL clamped to 1..``ttl_max_seconds``, then keep
    at most ``max_records`` finished records (0: no cap, else the hashes of the ones trimmed
    from the index are deleted after it); how many changes were applied."""
    script_keys = [keys.RESULTS]
    script_args: list[str] = [repr(now), str(ttl_max_seconds), str(max_records)]
    for jid, ttl_seconds, kind, fields in changes:
        script_keys.append(keys.result(jid))
        script_args += [jid, repr(float(ttl_seconds)), kind, str(len(fields))]
        for field_name, value in fields.items():
            script_args += [field_name, value]
    applied, *trimmed = script("result_write")(client, script_keys, script_args)
    if trimmed:
        # one DEL per key: in cluster mode a multi-key DEL would be split per slot anyway
        with client.pipeline(transaction=False) as pipe:
            for jid in trimmed:
                pipe.delete(keys.result(jid.decode() if isinstance(jid, bytes) else str(jid)))
            pipe.execute()
    return int(applied)


class Fetched(NamedTuple):
    """``fetch.lua``'s reply: the jobs moved in flight, as ``(raw, queue name)`` in the order
    taken, and the queues it skipped because they are paused."""

    jobs: list[tuple[bytes, str]]
    paused: frozenset[str]
    prioritised: bool = False  # some queue had prioritised jobs (jobsapp.priority)


def fetch(client: redis.Redis, *, inflight_key: str, queue_names: Sequence[str], count: int) -> Fetched:
    """``fetch.lua``: move up to ``count`` jobs from ``queue_names`` (in that order, skipping
    paused ones) to ``inflight_key``."""
    taken, paused, prioritised = script("fetch")(
        client,
        [
            inflight_key,
            keys.PAUSED,
            *[keys.queue(name) for name in queue_names],
            keys.PRIORITISED,
            *[keys.priority_queue(name) for name in queue_names],
        ],
        [count, *queue_names, priority.ZERO_RANK],
    )
    jobs = [(_bytes(taken[index + 1]), queue_names[int(taken[index]) - 1]) for index in range(0, len(taken), 2)]
    return Fetched(jobs, frozenset(queue_names[int(position) - 1] for position in paused), bool(int(prioritised)))


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


class Acknowledged(NamedTuple):
    """``ack.lua``'s reply: how many jobs were still in flight (and are no longer), and whether
    the stats counters were added (False: Redis refused the write, full; send them again)."""

    removed: int
    counted: bool


def ack(
    client: redis.Redis,
    *,
    inflight_key: str,
    raws: Sequence[bytes],
    jids: Sequence[str],
    processed: int,
    failed: int,
    today: dt.date,
    daily_ttl_seconds: int,
    token_key: str = "",
    token: str = "",
) -> Acknowledged:
    """``ack.lua``: remove ``raws`` from ``inflight_key`` and count them (once per ``token``)."""
    removed, counted = script("ack")(
        client,
        [
            inflight_key or keys.absent(),
            keys.RECOVERIES,
            keys.STAT_PROCESSED,
            keys.stat_processed_daily(today),
            keys.STAT_FAILED,
            keys.stat_failed_daily(today),
            token_key or keys.absent(),
        ],
        [processed, failed, daily_ttl_seconds, len(raws), *raws, *jids, token],
    )
    return Acknowledged(int(removed), bool(counted))


def _target(queue: str, level: int | None) -> str:
    """Where a job of ``queue`` is pushed: its LIST, or its priority ZSET (``jobsapp.priority``)."""
    return keys.queue(queue) if level is None else keys.priority_queue(queue)


def _rank(level: int | None) -> str | int:
    """The ARGV a pushing script reads for a job's priority: '' for a plain job, else its rank base."""
    return "" if level is None else priority.rank_base(level)


def _priority_keys(queue: str, level: int | None) -> tuple[str, str, str]:
    """The keys a script that pushes one job with ``_rank`` touches for a prioritised job: the
    prioritised queues SET, the priority sequence and the queue's wake list (left out for a
    plain job, which touches none of them)."""
    if level is None:
        return keys.absent(), keys.absent(), keys.absent()
    return keys.PRIORITISED, keys.PRIORITY_SEQUENCE, keys.priority_wake(queue)


def priority_push(pipe: redis.client.Pipeline, *, queue: str, level: int, data: bytes | str) -> None:
    """``priority_push.lua``, queued on ``pipe`` (its reply is 1, one job written): push a job
    with priority ``level`` (not 0) onto ``queue``'s priority ZSET, after every job of its priority."""
    script("priority_push")(
        pipe,
        [keys.QUEUES, keys.PRIORITISED, keys.PRIORITY_SEQUENCE, keys.priority_queue(queue), keys.priority_wake(queue)],
        [queue, priority.rank_base(level), data],
    )


def requeue(client: redis.Redis, *, inflight_key: str, jobs: Sequence[tuple[bytes, str]]) -> int:
    """``requeue.lua``: put ``(raw, queue)`` jobs back at the front of their queues ('' in-flight
    key: unconditionally), a prioritised job at the front of its priority; how many were put back."""
    levels = [priority.of_raw(raw) for raw, _ in jobs]
    reply = script("requeue")(
        client,
        [
            inflight_key or keys.absent(),
            keys.QUEUES,
            *[_target(queue, level) for (_, queue), level in zip(jobs, levels, strict=True)],
            keys.PRIORITISED,
            keys.PRIORITY_SEQUENCE,
        ],
        [*[raw for raw, _ in jobs], *[queue for _, queue in jobs], *[_rank(level) for level in levels]],
    )
    return int(reply)


def chord_part(
    client: redis.Redis,
    *,
    chord_id: str,
    jid: str,
    value_json: str,
    header_size: int,
    ttl_seconds: int,
    callback_job: bytes,
    queue: str,
    level: int | None = None,
) -> tuple[bool, int, bool]:
    """``chord_part.lua``: record header task ``jid``'s value in chord ``chord_id`` and push
    ``callback_job`` to ``queue`` (at priority ``level``; None: to its list) when that completes
    the ``header_size`` parts, atomically; (added, parts recorded, pushed)."""
    added, count, pushed = script("chord_part")(
        client,
        [keys.chord(chord_id), keys.QUEUES, _target(queue, level), *_priority_keys(queue, level)],
        [jid, value_json, header_size, ttl_seconds, callback_job, queue, _rank(level)],
    )
    return bool(int(added)), int(count), bool(int(pushed))


def limiter_release(client: redis.Redis, *, name: str, token: str, permits_key: str) -> int:
    """``limiter_release.lua``: give back a concurrent slot once, waking one parked job; 0 (already
    released), 1 or 2 (released and a parked job made due)."""
    script_keys = [keys.limiter_holders(name), permits_key or keys.absent(), keys.limiter_parked(name), keys.SCHEDULE]
    return int(script("limiter_release")(client, script_keys, [token]))


def limiter_park(client: redis.Redis, *, name: str, member: str, size: int, max_parked: int, ttl_seconds: int) -> int:
    """``limiter_park.lua``: register a rescheduled job to be woken by the next release of ``name``;
    1 parked, 0 made due now (a slot is free), -1 not in the schedule set."""
    return int(
        script("limiter_park")(
            client, [keys.limiter_holders(name), keys.limiter_parked(name), keys.SCHEDULE], [member, size, max_parked, ttl_seconds]
        )
    )
