"""Orphan recovery: jobs left in the in-flight list of a process that died are put back.

Two paths, both through ``recover_requeue.lua`` or ``recover_bury.lua`` (one job per call, guarded by LREM so a job is moved
at most once however many recoverers race):

- at start, a process running in supervisor slot N on this host takes over the in-flight list
  of the previous occupant of that slot (``jobsapp:slot:<host>:<N>``) at once, when that
  process is gone (its pid is not alive here);
- thread ``jobsapp.sweeper`` takes ``jobsapp:lock:sweep`` (one sweeper at a time across all
  processes), and recovers every list in ``jobsapp:inflight`` whose owner's heartbeat key has
  expired, and drops such owners from ``processes``. The fleet sweeps once per
  ``ORPHAN_SWEEP_INTERVAL_SECONDS`` (15 s) in all, the processes in turn, in the order and on
  the server clock the schedulers take their turns by (``jobsapp:schedulers``, scheduler.py):
  with N processes each one wakes every N intervals, so the fleet's sweeping traffic does not
  grow with the number of processes (each one sweeping every interval made it grow with its
  square: every sweep reads every process's liveness). A sweeper built without an identity in
  that list (a process whose scheduler has not polled yet) counts itself in; after a round
  Redis failed, the next comes a jittered interval later. Liveness is the Redis TTL (server time), so clock
  skew between hosts cannot make a live process look dead. A sweeper sweeps only after its own
  heartbeat has succeeded twice in a row, so after a Redis outage every live process has had
  time to beat again before anyone decides who is dead.

Jobs go back to the front (right end) of their queues in the order they were taken (the oldest
in front: the newest is put back first), marked with the payload
key ``jobsapp_recovered`` (how many dead processes they were in flight in). A worker runs a
marked job in quarantine (``Quarantine``): one at a time per process, with a "started" mark in
``jobsapp:started:<identity>`` while it runs. When that process dies too, only the marked jobs
that were actually running are counted again; the ones that were only prefetched, or waiting
for the quarantine, come back uncounted. A job counted ``POISON_RECOVERY_LIMIT`` times (3) has
killed its process every time: it goes to the dead set as poison. Without the quarantine, an
innocent job fetched in the same batch as a crashing one would ride along through three
crashes and be buried with it (the fault suite's scenario 6 found that). A requeued job is put
back through the "job ended" door's ``put_back`` (middleware hears ``on_requeue`` reason
"recovered"), and a buried job's features and middleware hear that it ended through its
``finish`` (``jobsapp.ending``: its unique lock released, its batch counting it failed, its
record failed, ``on_dead`` reason "poison" or "malformed").
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable
from typing import TypeVar, cast

import redis

from .. import ending, keys, limiter, scripts
from ..clock import SYSTEM_CLOCK, Clock
from ..component import PollingComponent
from ..conf import jobs_settings
from ..connection import CONNECTION_ERRORS, REDIS_ERRORS, as_bytes, as_text
from ..ending import Fate
from ..errors import PoisonJob, RedisUnavailable
from ..outcomes import DeadReason, RequeueReason
from ..payload import RECOVERED_KEY, Item, compact_json, decode, encode_unchecked, malformed_item, now
from ..processes import prune_dead
from .retry import CrossPartitionFiling, dead_trim_args, with_error_fields
from .scheduler import fleet, next_turn_seconds

logger = logging.getLogger("jobsapp.recovery")

#: Redis going away mid-sweep (raw, or as the api's documented error).
SWEEP_ERRORS: tuple[type[BaseException], ...] = (*REDIS_ERRORS, RedisUnavailable)

T = TypeVar("T")

#: How long a recovered process's verdict (keys.fenced) lives: far past any pause it may wake from.
FENCED_VERDICT_SECONDS = 24 * 3600


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` may be a live process here. Our own pid counts as alive: in containers that
    share a hostname every worker can be pid 1, and only the heartbeat can tell them apart (the
    sweeper then recovers a dead one's jobs once its heartbeat has expired)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bury(client: redis.Redis, raw: bytes, *, inflight_key: str, index: int, member: str, jid: str, died_at: float) -> bool:
    """``recover_bury.lua`` on partition 0; from a partition above 0 of a partitioned cluster,
    the two steps of ``CrossPartitionFiling`` into partition 0's dead set."""
    cutoff, maximum = dead_trim_args(died_at)
    if index == 0:
        return scripts.recover_bury(
            client, inflight_key=inflight_key, raw=raw, member=member, jid=jid, died_at=died_at, dead_cutoff=cutoff, dead_max_jobs=maximum
        )
    filing = CrossPartitionFiling(
        client,
        inflight_key=inflight_key,
        index=index,
        target_set=keys.DEAD,
        raw=raw,
        score=died_at,
        member=member,
        jid=jid,
        dead_cutoff=cutoff,
        dead_max_jobs=maximum,
    )
    return filing()


def _bury_malformed(client: redis.Redis, raw: bytes, *, inflight_key: str, exception: BaseException, index: int = 0) -> bool:
    """Move an in-flight entry that is not a usable job to the dead set, wrapped so its raw
    text is kept (``recover_bury.lua``). True when this call moved it."""
    timestamp = now()
    reason = f"{type(exception).__name__}: {str(exception)[:500]}"
    dead_item = with_error_fields(malformed_item(raw, jobs_settings.DEFAULT_QUEUE, reason), exception, timestamp)
    member = compact_json(dead_item, allow_nan=True)  # another client's job: buried as it is
    moved = _bury(client, raw, inflight_key=inflight_key, index=index, member=member, jid="", died_at=timestamp)
    if moved:
        logger.error("recovery: malformed in-flight job sent to the dead set: %s", reason)
        original = _decoded_or_none(raw)  # a job that decodes but could not be handled: its features hear it
        told = original if original is not None else dead_item  # else middleware hears the wrapped entry
        ending.finish(client, told, Fate.DEAD, error=exception, reason=DeadReason.MALFORMED)
    return moved


def _decoded_or_none(raw: bytes) -> Item | None:
    try:
        return decode(raw)
    except ValueError:  # not a job at all: no feature can be told it ended
        return None


def _recover_one(client: redis.Redis, raw: bytes, *, inflight_key: str, started_key: str, limit: int, index: int = 0) -> tuple[bool, str]:
    """Put one in-flight job (of ``inflight_key``, in partition ``index``) back on its queue in
    that partition, or in the dead set when malformed or poison. Returns (moved by this call,
    "queue" or "dead")."""
    try:
        item = decode(raw)
    except ValueError as exc:  # malformed (any bytes: decode raises nothing else): dead, wrapped so the raw text is kept
        return _bury_malformed(client, raw, inflight_key=inflight_key, exception=exc, index=index), "dead"
    jid = item.get("jid")
    jid = jid if isinstance(jid, str) else ""
    with keys.using_partition(index):
        previous = int(client.hget(keys.RECOVERIES, jid) or 0)
    # a quarantined job is to blame only if it was running (its started mark is there)
    blamed = RECOVERED_KEY not in item or bool(client.hexists(started_key, jid))
    count = previous + 1 if blamed else previous
    queue = item.get("queue")
    queue = queue if isinstance(queue, str) and queue else str(jobs_settings.DEFAULT_QUEUE)
    if count < limit:
        try:
            marked = encode_unchecked({**item, RECOVERED_KEY: count})
        except ValueError:  # NaN or the like from a foreign client: pushed back unmarked
            marked = b""
        with keys.using_partition(index):
            put_back = scripts.recover_requeue(
                client, inflight_key=inflight_key, raw=raw, queue=queue, jid=jid, marked=marked, blamed=blamed
            )
        moved = put_back > 0
        if moved:
            ending.put_back(item, reason=RequeueReason.RECOVERED)
        return moved, "queue"
    poison = PoisonJob(f"recovered from {count} dead processes; treated as poison")
    timestamp = now()
    dead_item = with_error_fields(item, poison, timestamp)
    member = compact_json(dead_item, allow_nan=True)  # another client's job: buried as it is
    moved = _bury(client, raw, inflight_key=inflight_key, index=index, member=member, jid=jid, died_at=timestamp)
    if moved:
        logger.error("jid=%s class=%s poison job sent to the dead set: %s", jid, str(item.get("class"))[:200], poison)
        ending.finish(client, dead_item, Fate.DEAD, error=poison, reason=DeadReason.POISON)
    return moved, "dead"


def recover_list(client: redis.Redis, identity: str) -> tuple[int, int]:
    """Put back every job of ``identity``'s in-flight lists (one per partition on a partitioned
    cluster, each job back to its own partition's queue); returns (requeued, buried)."""
    started_key = keys.started(identity)
    requeued = buried = 0
    limit = int(jobs_settings.POISON_RECOVERY_LIMIT)
    for index in keys.partitions():
        inflight_key = keys.in_partition(keys.inflight(identity), index)
        while True:
            raw = client.lindex(inflight_key, 0)  # newest first: each goes in front of the last, the oldest ends in front
            if raw is None:
                break
            raw = as_bytes(raw)
            try:
                result, outcome = _recover_one(client, raw, inflight_key=inflight_key, started_key=started_key, limit=limit, index=index)
            except REDIS_ERRORS:  # the caller (sweeper, start-up) retries the whole list later
                raise
            except Exception as exc:  # a hostile entry must not stop recovery of the ones behind it: dead
                logger.exception("recovery: an in-flight entry of %s could not be handled; it goes to the dead set", identity)
                result, outcome = _bury_malformed(client, raw, inflight_key=inflight_key, exception=exc, index=index), "dead"
            if result and outcome == "queue":
                requeued += 1
            elif result:
                buried += 1
            # when not moved, someone else moved it first: look at the list again
    client.delete(started_key)
    limiter.release_owner(client, identity)  # its jobs are back: so are their concurrent slots
    client.srem(keys.INFLIGHT_INDEX, identity)
    # the verdict, for the process itself if it still beats (a pause past its TTL): it fences
    client.set(keys.fenced(identity), "1", ex=FENCED_VERDICT_SECONDS)
    if requeued or buried:
        logger.warning("recovered in-flight jobs of %s: %d back on their queues, %d poison to the dead set", identity, requeued, buried)
    return requeued, buried


class Quarantine:
    """Runs recovered jobs (payload key ``jobsapp_recovered``) one at a time in this process, each
    with a started mark in ``jobsapp:started:<identity>``, so that if the process dies the blame
    falls on the job that was running. Other jobs run alongside as usual. Used by the processor
    only for marked jobs: the common path costs one dict lookup.
    """

    def __init__(self, client: redis.Redis, identity: str) -> None:
        self.client = client
        self.started_key = keys.started(identity)
        self._lock = threading.Lock()

    def wrap(self, jid: str, call: Callable[[], T]) -> Callable[[], T]:
        def run_quarantined() -> T:
            with self._lock:
                try:
                    self.client.hset(self.started_key, jid, 1)
                except CONNECTION_ERRORS as exc:  # runs unmarked: a crash now would not count against it
                    logger.warning("jid=%s could not mark the recovered job as started (%s)", jid, exc)
                try:
                    return call()
                finally:
                    try:
                        self.client.hdel(self.started_key, jid)
                    except CONNECTION_ERRORS as exc:  # the mark is dropped with the list when recovered
                        logger.warning("jid=%s could not clear the started mark (%s)", jid, exc)

        return run_quarantined


def claim_slot(client: redis.Redis, *, hostname: str, slot_number: int, identity: str) -> str | None:
    """Record this process in its slot; returns the previous occupant if it is dead, else None."""
    previous = client.set(keys.slot(hostname, slot_number), identity, get=True)
    if not previous or previous is True:
        return None
    previous_identity = as_text(previous)
    if previous_identity == identity:
        return None
    try:
        previous_pid = int(previous_identity.rsplit(":", 2)[1])
    except (IndexError, ValueError):
        return None
    if pid_alive(previous_pid):
        return None
    return previous_identity


class Sweeper(PollingComponent):
    """Thread ``jobsapp.sweeper``: periodic, locked recovery of dead processes' in-flight lists.
    A round Redis fails is logged once per outage; the next round comes at the usual interval
    (each move is atomic, nothing is half-moved)."""

    thread_name = "sweeper"
    logger = logger
    outage_errors = SWEEP_ERRORS

    def __init__(
        self,
        *,
        client: redis.Redis,
        identity: str,
        interval_seconds: float,
        lock_seconds: float,
        ready: Callable[[], bool],
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock=clock)
        self.client = client
        self.identity = identity
        self.interval_seconds = interval_seconds
        self.lock_seconds = lock_seconds
        self.ready = ready
        self.rng = rng or random.Random()

    def _jittered_interval_seconds(self) -> float:
        return self.interval_seconds * self.rng.uniform(0.5, 1.5)

    def first_delay_seconds(self) -> float:
        try:
            return self.next_turn_seconds()
        except SWEEP_ERRORS:  # Redis away at start: a jittered interval, as after a failed round
            return self._jittered_interval_seconds()

    def retry_seconds(self, backoff_seconds: float) -> float:
        return self._jittered_interval_seconds()

    def poll(self) -> float:
        self.sweep()
        return self.next_turn_seconds()

    def next_turn_seconds(self) -> float:
        """The seconds until this process's next turn among the fleet's sweepers (see the header)."""
        seconds, microseconds = self.client.time()
        now = int(seconds) + int(microseconds) / 1_000_000
        entries = cast("list[tuple[bytes, float]]", self.client.zrange(keys.SCHEDULERS, 0, -1, withscores=True))
        live, _ = fleet(entries, now=now, poll_interval_seconds=float(jobs_settings.SCHEDULER_POLL_INTERVAL_SECONDS))
        if self.identity not in live:
            live = sorted([*live, self.identity])
        return next_turn_seconds(now, rank=live.index(self.identity), fleet_size=len(live), interval_seconds=self.interval_seconds)

    def sweep(self) -> int:
        """Recover the lists of every process whose heartbeat has expired; returns jobs moved."""
        if not self.ready():
            return 0
        token = os.urandom(8).hex()
        if not self.client.set(keys.SWEEP_LOCK, token, nx=True, px=int(self.lock_seconds * 1000)):
            return 0
        moved = 0
        try:
            owners = {as_text(member) for member in self.client.smembers(keys.INFLIGHT_INDEX)}
            # plus lists missing from the index: a process that fetched after the index was lost
            # (FLUSHDB, a restored backup) and died before its next beat re-registered it
            for index in keys.partitions():
                prefix = keys.in_partition(keys.inflight(""), index)
                owners.update(as_text(key)[len(prefix) :] for key in self.client.scan_iter(match=f"{prefix}*", count=1000))
            for owner in sorted(owners):
                if owner == self.identity or self._stop.is_set():
                    continue
                if not self.ready():  # stalled mid-sweep (a frozen Redis): judge no one on stale beats
                    break
                if self.client.exists(keys.process(owner)):
                    continue
                requeued, buried = recover_list(self.client, owner)
                moved += requeued + buried
            prune_dead(self.client)  # as Sidekiq's Web UI does: dead identities leave ``processes``
        finally:
            if self.client.get(keys.SWEEP_LOCK) == token.encode():
                self.client.delete(keys.SWEEP_LOCK)
        return moved
