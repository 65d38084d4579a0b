"""Rate and concurrency limits shared by every process and host: ``jobsapp.limiter``.

    API = limiter.concurrent("partner-api", 3, lock_timeout=30)

    class SyncPartner(Job):
        def perform(self, account_id):
            with API:                      # or: with limiter.window("mail", 10, 1): ...
                call_the_partner(account_id)

Three kinds, as Sidekiq Enterprise's, each one Lua script judged by the Redis server's clock:

- ``concurrent(name, size, lock_timeout=30, wait_timeout=5)``: at most ``size`` holders at once.
  A holder is released when its block ends, or its job ends, is put back at shutdown or is
  recovered from a dead process (see below); otherwise after ``lock_timeout`` seconds (a block
  running longer loses its slot: keep ``lock_timeout`` above the work's duration).
- ``window(name, count, per)``: at most ``count`` entries in any span of ``per`` seconds (a
  sliding window: no burst of 2 x count across a boundary, unlike fixed windows).
- ``bucket(name, count, per)``: at most ``count`` per clock-aligned interval of ``per`` seconds.

``per`` is seconds, or "second", "minute", "hour", "day". Entering waits up to ``wait_timeout``
seconds (default 5; 0 to never wait) for room, sleeping as long as the script says room may take
(a concurrent limiter asks again every 50 ms), then raises ``OverLimit``; the limiter's
``over_limit`` counter counts those refusals (one per refused entry, never per attempt).
Raised out of ``perform``, OverLimit is not a failure: the processor puts the job back in the
schedule set (``reschedule``, atomically with its ack), not counted failed, not a retry; after
``MAX_RESCHEDULES`` it fails like any exception and is retried (so a limit that can never be met
ends in the dead set, not in an endless loop). When it comes back:

- refused by a rate limiter (window, bucket): when the limiter has room again, by its clock (the
  script's answer), plus a jitter of at most ``RATE_JITTER_SECONDS``;
- refused by a concurrent limiter: as soon as a slot frees. The job is parked on the limiter
  (``limiter_park.lua``) and every release makes the oldest parked job due now
  (``limiter_release.lua``), so it is on its queue within one scheduler poll of the holder's
  end. Its schedule time is only a fallback, for a slot freed by its lock's expiry: when the
  earliest lock expires (at most ``MAX_RESCHEDULE_SECONDS``).

``reschedule`` logs when the job will run again as it is: "in 0.4 s" for a rate limit, "when a
slot is released, at the latest in 29.0 s" for a parked job (its fallback is not its run time).

Permits follow the job. In a worker, each job runs as a ``Holder`` (its process identity and
jid, set by the processor through ``holding``): a concurrent slot's token is ``<jid>:<random>``,
recorded in the holder's process's permits HASH by the script that grants it, and in the holder
before the script runs. A slot is therefore released exactly once (only the release whose ZREM
removes the token frees it and wakes a job), whichever path ends the job first:

- the ``with`` block ending;
- the job ending any other way (``holding``'s backstop releases what it still holds): a
  ``JobTimeout`` landing inside ``acquire`` after the grant, or in ``__exit__`` before the
  release, leaves nothing held once the job has failed;
- a graceful shutdown putting the job back (``release_at_exit``, called by the manager; a put-back
  job still waiting for room then gets ``PutBack`` and never starts in this process);
- the process dying (``release_owner``, called by the orphan sweeper and by the next process in
  the supervisor slot when they recover its in-flight jobs).

``JOBSAPP["QUEUE_LIMITS"] = {"imports": 2}`` caps the jobs of a queue running at once across
every process, with no code: the processor wraps those jobs in ``concurrent("queue:<name>")``,
whose ``lock_timeout`` is ``QUEUE_LIMIT_LOCK_TIMEOUT_SECONDS`` (600 s: only a slot whose process
is neither shut down nor recovered waits that long; keep it above the longest job of a capped
queue).

Keys: keys.LIMITERS, keys.limiter(name), keys.limiter_holders(name), keys.limiter_parked(name),
keys.limiter_permits(identity). Limiter objects hold no per-use state on ``self`` (entered
permits live in a ContextVar: per thread, per asyncio task), so one module-level limiter serves
every thread and task; nesting the same limiter takes two slots. ``async with limiter:`` works
too, waiting in a thread so the event loop is not blocked.

The worker reaches this module through the door's table (``jobsapp.ending``'s ``limits`` row,
the one row that hears every job, at the ``guard`` moment): ``within`` for ``QUEUE_LIMITS`` and
``holding`` around every ``perform``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import socket
import time
from collections.abc import Callable
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis

from . import keys, scripts
from .conf import jobs_settings
from .connection import REDIS_ERRORS, as_text, get_redis
from .errors import JobsError
from .payload import compact_json, now

if TYPE_CHECKING:
    from .worker.fetch import UnitOfWork
    from .worker.retry import RetryPolicy

logger = logging.getLogger("jobsapp.limiter")

PERIODS_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
#: Times a job is put back for being over a limit before OverLimit counts as a failure.
MAX_RESCHEDULES = 20
#: The longest one reschedule delays a job.
MAX_RESCHEDULE_SECONDS = 300.0
#: Payload key counting the reschedules of a job.
RESCHEDULES_KEY = "limiter_reschedules"
#: How often a waiting concurrent limiter asks again (slots free when blocks end, unannounced).
CONCURRENT_POLL_SECONDS = 0.05
#: The most a job refused by a rate limiter comes back after the limiter has room (spreads a herd).
RATE_JITTER_SECONDS = 0.5
#: The most jobs parked on one concurrent limiter (the oldest beyond it wait for their fallback).
MAX_PARKED = 10_000


class OverLimit(JobsError):
    """A limiter had no room within its wait_timeout. Raised out of ``perform``, the job is put
    back in the schedule set (not a failure, not a retry), up to MAX_RESCHEDULES; see the header
    for when it comes back."""

    def __init__(self, name: str, retry_in_seconds: float, limiter: Limiter | None = None) -> None:
        super().__init__(f"over the limit of {name!r}; room expected in {retry_in_seconds:.2f} s")
        self.name = name
        self.retry_in_seconds = retry_in_seconds
        self.limiter = limiter


def _seconds(per: float | str) -> float:
    if isinstance(per, str):
        if per not in PERIODS_SECONDS:
            raise ValueError(f"per must be seconds or one of {', '.join(PERIODS_SECONDS)}, not {per!r}")
        return float(PERIODS_SECONDS[per])
    if isinstance(per, bool) or not isinstance(per, (int, float)) or not 0 < per < math.inf:
        raise ValueError(f"per must be a positive number of seconds, not {per!r}")
    return float(per)


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a whole number >= 1, not {value!r}")
    return value


def _name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a limiter needs a non-empty name, not {name!r}")
    return name


# --- who holds a permit ------------------------------------------------------------------

#: This process's identity for permits (see ``owner``), and the owner of each in-flight key seen;
#: both forgotten in a forked child, which is another process.
_process_owner: list[str] = []
_owners: dict[str, str] = {}


def _forget_owners() -> None:
    _process_owner.clear()
    _owners.clear()


os.register_at_fork(after_in_child=_forget_owners)


def owner(inflight_key: str) -> str:
    """The identity this process's permits are recorded under: its worker identity, read from
    a reliable fetch's in-flight list (``jobsapp:inflight:<identity>``, the sweeper's unit of
    recovery) the first time one is given, else one made up per process (basic fetch, code
    outside a worker). Permits taken outside a job (a thread the job started) count as the
    process's too."""
    identity = _owners.get(inflight_key)
    if identity is not None:
        return identity
    prefix = keys.inflight("")
    if inflight_key.startswith(prefix) and len(inflight_key) > len(prefix):
        identity = inflight_key[len(prefix) :]
        _process_owner[:] = [identity]
        _owners[inflight_key] = identity
        return identity
    if not _process_owner:
        _process_owner.append(f"{socket.gethostname()}:{os.getpid()}:{os.urandom(6).hex()}")
    return _process_owner[0]


#: The processes (identities) past their shutdown deadline: the jobs they still ran then were put
#: back on their queues, so one of them still waiting for room must not take it and start here as
#: well (``release_at_exit`` adds the process; ``acquire`` raises ``PutBack`` for its jobs).
_stopped_owners: set[str] = set()


class PutBack(BaseException):  # a signal to the thread, as GeneratorExit, not an error
    """Raised in a job that waits for a limiter's room when its process has put it back on its
    queue at the shutdown deadline: it runs again from there, never here too. A BaseException,
    so a job's ``except Exception`` does not swallow it; the processor files nothing for it."""


class Holder:
    """The job a thread (or asyncio task) is running, for the concurrent permits it takes: its
    process's identity, its jid, and the permits it may hold. A permit is added *before* the
    script that grants it runs and removed *after* the one that releases it, so whatever the
    moment an exception interrupts either, the holder's list covers every slot Redis may have
    granted it; ``holding`` releases what is left when the job ends."""

    __slots__ = ("ended", "identity", "jid", "permits")

    def __init__(self, identity: str, jid: str) -> None:
        self.identity = identity
        self.jid = jid
        self.permits: list[Permit] = []
        self.ended = False  # the job is over: a grant arriving now (an abandoned async wait) is given back


_holder: ContextVar[Holder | None] = ContextVar("jobsapp.limiter.holder", default=None)


def holding(inflight_key: str, jid: str, call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` (a job's run) as the job ``jid`` of this process: the concurrent permits it takes
    are recorded under it, and those it still holds when ``call`` ends, however it ends, are
    released then (the processor wraps every job with it, outside the timeout's guard, so no
    JobTimeout can land in this release)."""
    identity = owner(inflight_key)

    def held() -> Any:
        holder = Holder(identity, jid)
        context_token = _holder.set(holder)
        try:
            return call()
        finally:
            _holder.reset(context_token)
            holder.ended = True
            if holder.permits:
                release_left(holder)

    return held


def release_left(holder: Holder) -> int:
    """Release the permits ``holder`` still holds (its job ended with them); how many were."""
    released = 0
    for permit in list(holder.permits):
        try:
            released += permit.limiter.release(permit)
        except REDIS_ERRORS as exc:  # held until its lock_timeout, as when the process dies
            logger.warning(
                "jid=%s could not release its slot of %r (%s); it frees at its lock timeout", holder.jid, permit.limiter.name, exc
            )
    if released:
        logger.info("jid=%s released %d limiter slots its job still held when it ended", holder.jid, released)
    return released


def _release_tokens(client: redis.Redis, identity: str, wanted: Callable[[str], bool]) -> int:
    """Release the slots recorded in ``identity``'s permits HASH whose token ``wanted`` accepts."""
    permits_key = keys.limiter_permits(identity)
    released = 0
    for token, name in client.hgetall(permits_key).items():
        token_text = as_text(token)
        if wanted(token_text):
            released += scripts.limiter_release(client, name=as_text(name), token=token_text, permits_key=permits_key) > 0
    return released


def release_owner(client: redis.Redis, identity: str) -> int:
    """Release every slot held by the process ``identity`` (dead: its in-flight jobs are being
    recovered); how many were still held. Called by ``recovery.recover_list``."""
    released = _release_tokens(client, identity, lambda token: True)
    client.delete(keys.limiter_permits(identity))
    if released:
        logger.warning("released %d limiter slots held by the dead process %s", released, identity)
    return released


def release_at_exit(client: redis.Redis, inflight_key: str) -> int:
    """Release every slot this process still holds as it shuts down: those of the jobs still
    running at the shutdown deadline (put back on their queues) or filed past the timeout's hard
    limit, and any taken outside a job; how many were held. Never raises for Redis: a slot it
    cannot release frees when the process's in-flight list is recovered, or at its lock timeout."""
    identity = owner(inflight_key)
    _stopped_owners.add(identity)  # first: a put-back job still waiting for room takes none of these
    try:
        released = _release_tokens(client, identity, lambda token: True)
    except REDIS_ERRORS as exc:
        logger.warning("could not release the limiter slots of the jobs put back (%s)", exc)
        return 0
    if released:
        logger.info("released %d limiter slots of jobs put back at shutdown", released)
    return released


class Permit:
    """What ``with limiter:`` gives: when the slot or admission was granted (server clock)."""

    __slots__ = ("acquired_at", "holder", "limiter", "permits_key", "token")

    def __init__(self, token: str, acquired_at: float, *, limiter: Limiter, holder: Holder | None = None, permits_key: str = "") -> None:
        self.token = token
        self.acquired_at = acquired_at
        self.limiter = limiter
        self.holder = holder
        self.permits_key = permits_key


class Limiter:
    """Base of the three kinds: a context manager that waits for room or raises OverLimit."""

    kind = ""

    def __init__(self, name: str, *, wait_timeout: float = 5.0, rng: random.Random | None = None) -> None:
        self.name = _name(name)
        if isinstance(wait_timeout, bool) or not isinstance(wait_timeout, (int, float)) or wait_timeout < 0:
            raise ValueError(f"wait_timeout must be seconds >= 0, not {wait_timeout!r}")
        self.wait_timeout = float(wait_timeout)
        self.rng = rng or random.Random()
        # the permits entered and not yet left, per thread and per asyncio task
        self._entered: ContextVar[tuple[Permit, ...]] = ContextVar(f"jobsapp.limiter.{self.name}", default=())
        self._described = False

    # --- what each kind defines ---------------------------------------------------------

    def _try(self, client: redis.Redis, permit: Permit) -> tuple[bool, float]:
        """One attempt: (granted, server time if granted else seconds until room may come)."""
        raise NotImplementedError

    def _new_permit(self) -> Permit:
        return Permit(os.urandom(8).hex(), 0.0, limiter=self)

    def _forget(self, permit: Permit) -> None:
        """``acquire`` was refused: nothing was granted under ``permit``."""

    def release(self, permit: Permit, client: redis.Redis | None = None) -> int:
        """Give back what ``acquire`` took (nothing for rate limiters); 1 when this call freed it."""
        return 0

    def describe(self) -> dict[str, str]:
        """The limiter's settings, as stored for the dashboard."""
        raise NotImplementedError

    def _poll_seconds(self, hint_seconds: float) -> float:
        return hint_seconds

    def reschedule_delay_seconds(self, reschedules: int, hint_seconds: float, rng: random.Random) -> float:
        """How long a job refused by this limiter waits in the schedule set: till it has room."""
        return min(max(hint_seconds, 0.0) + rng.uniform(0.0, RATE_JITTER_SECONDS), MAX_RESCHEDULE_SECONDS)

    def park(self, client: redis.Redis, member: str) -> int | None:
        """A job this limiter refused is in the schedule set as ``member`` (concurrent: wake it
        at the next release). ``limiter_park``'s answer (1 parked, 0 made due now, -1 no longer
        in the schedule set), None for a limiter that does not park (a rate limit)."""
        return None

    # --- the protocol -------------------------------------------------------------------

    def acquire(self, client: redis.Redis | None = None) -> Permit:
        """Take room, waiting up to ``wait_timeout``; OverLimit when there is none in time."""
        client = client or get_redis()
        if not self._described:
            pipe = client.pipeline(transaction=False)
            pipe.sadd(keys.LIMITERS, self.name)
            pipe.hset(keys.limiter(self.name), mapping={key: value for key, value in self.describe().items()})
            pipe.execute()
            self._described = True
        permit = self._new_permit()
        holder = _holder.get()
        deadline = time.monotonic() + self.wait_timeout
        try:
            while True:
                if holder is not None and holder.identity in _stopped_owners:  # put back: released below
                    raise PutBack(f"jid={holder.jid} was put back on its queue at the shutdown deadline")
                granted, value = self._try(client, permit)
                if granted:
                    if holder is not None and holder.identity in _stopped_owners:  # granted as it was put back
                        raise PutBack(f"jid={holder.jid} was put back on its queue at the shutdown deadline")
                    permit.acquired_at = value
                    return permit
                remaining = deadline - time.monotonic()
                wait = self._poll_seconds(value)
                if remaining <= 0 or (wait >= value and value > remaining):  # no room before the deadline
                    break
                time.sleep(min(wait, remaining) * self.rng.uniform(1.0, 1.1) + 0.0005)
        except OverLimit:
            self._forget(permit)
            raise
        except BaseException:  # re-raised: interrupted (JobTimeout, Redis) after a grant perhaps
            try:
                self.release(permit, client)
            except REDIS_ERRORS as exc:  # the job-ended backstop tries again (the holder still lists it)
                logger.warning("could not give back a slot of %r after an interrupted entry (%s)", self.name, exc)
            raise
        self._forget(permit)  # refused: nothing was granted
        client.hincrby(keys.limiter(self.name), "over_limit", 1)  # one refusal per refused entry, not per attempt
        raise OverLimit(self.name, max(value, 0.0), self)

    def __enter__(self) -> Permit:
        permit = self.acquire()
        self._entered.set((*self._entered.get(), permit))
        return permit

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None) -> None:
        *outer, permit = self._entered.get()
        self._entered.set(tuple(outer))
        self.release(permit)

    async def __aenter__(self) -> Permit:
        """``async with limiter:`` in an ``async def perform``: the wait runs off the event loop."""
        permit = await asyncio.to_thread(self.acquire)
        self._entered.set((*self._entered.get(), permit))
        return permit

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None) -> None:
        *outer, permit = self._entered.get()
        self._entered.set(tuple(outer))
        await asyncio.to_thread(self.release, permit)


class Concurrent(Limiter):
    kind = "concurrent"

    def __init__(
        self, name: str, size: int, *, lock_timeout: float = 30.0, wait_timeout: float = 5.0, rng: random.Random | None = None
    ) -> None:
        super().__init__(name, wait_timeout=wait_timeout, rng=rng)
        self.size = _positive_int(size, "size")
        self.lock_timeout = _seconds(lock_timeout)

    def _new_permit(self) -> Permit:
        holder = _holder.get()
        if holder is None:  # outside a job (a thread it started, a web process): the process's
            return Permit(f":{os.urandom(8).hex()}", 0.0, limiter=self, permits_key=keys.limiter_permits(owner("")))
        permit = Permit(f"{holder.jid}:{os.urandom(8).hex()}", 0.0, limiter=self, holder=holder)
        permit.permits_key = keys.limiter_permits(holder.identity)
        holder.permits.append(permit)  # before the script can grant it (see Holder)
        return permit

    def _try(self, client: redis.Redis, permit: Permit) -> tuple[bool, float]:
        admission = scripts.limiter_concurrent(
            client,
            name=self.name,
            token=permit.token,
            size=self.size,
            lock_timeout_seconds=self.lock_timeout,
            permits_key=permit.permits_key,
        )
        if admission.granted and permit.holder is not None and permit.holder.ended:
            # granted to a job that is over (an async wait outliving its cancelled job): given back
            self.release(permit, client)
            raise OverLimit(self.name, 0.0, self)
        return admission

    def _forget(self, permit: Permit) -> None:
        holder = permit.holder
        if holder is not None and permit in holder.permits:
            holder.permits.remove(permit)

    def release(self, permit: Permit, client: redis.Redis | None = None) -> int:
        released = scripts.limiter_release(client or get_redis(), name=self.name, token=permit.token, permits_key=permit.permits_key)
        holder = permit.holder
        if holder is not None and permit in holder.permits:  # after the script (see Holder)
            holder.permits.remove(permit)
        return int(released > 0)

    def _poll_seconds(self, hint_seconds: float) -> float:
        # a slot frees when any holder's block ends, which nobody announces: ask again soon
        return min(hint_seconds, CONCURRENT_POLL_SECONDS)

    def reschedule_delay_seconds(self, reschedules: int, hint_seconds: float, rng: random.Random) -> float:
        # a fallback only: the job is parked and the next release makes it due at once; this
        # time is for a slot that frees by its lock's expiry (the earliest one, ``hint_seconds``)
        return min(max(hint_seconds, 0.0) * rng.uniform(1.0, 1.05) + rng.uniform(0.0, RATE_JITTER_SECONDS), MAX_RESCHEDULE_SECONDS)

    def park(self, client: redis.Redis, member: str) -> int | None:
        ttl_seconds = math.ceil(MAX_RESCHEDULE_SECONDS * 1.1 + RATE_JITTER_SECONDS) + 60
        return scripts.limiter_park(client, name=self.name, member=member, size=self.size, max_parked=MAX_PARKED, ttl_seconds=ttl_seconds)

    def describe(self) -> dict[str, str]:
        return {"kind": self.kind, "limit": str(self.size), "lock_timeout": repr(self.lock_timeout)}


class Window(Limiter):
    kind = "window"

    def __init__(self, name: str, count: int, per: float | str, *, wait_timeout: float = 5.0, rng: random.Random | None = None) -> None:
        super().__init__(name, wait_timeout=wait_timeout, rng=rng)
        self.count = _positive_int(count, "count")
        self.per_seconds = _seconds(per)

    def _try(self, client: redis.Redis, permit: Permit) -> tuple[bool, float]:
        return scripts.limiter_window(client, name=self.name, token=permit.token, count=self.count, per_seconds=self.per_seconds)

    def describe(self) -> dict[str, str]:
        return {"kind": self.kind, "limit": str(self.count), "per_seconds": repr(self.per_seconds)}


class Bucket(Limiter):
    kind = "bucket"

    def __init__(self, name: str, count: int, per: float | str, *, wait_timeout: float = 5.0, rng: random.Random | None = None) -> None:
        super().__init__(name, wait_timeout=wait_timeout, rng=rng)
        self.count = _positive_int(count, "count")
        self.per_seconds = _seconds(per)

    def _try(self, client: redis.Redis, permit: Permit) -> tuple[bool, float]:
        return scripts.limiter_bucket(client, name=self.name, count=self.count, per_seconds=self.per_seconds)

    def describe(self) -> dict[str, str]:
        return {"kind": self.kind, "limit": str(self.count), "per_seconds": repr(self.per_seconds)}


def concurrent(name: str, size: int, *, lock_timeout: float = 30.0, wait_timeout: float = 5.0) -> Concurrent:
    """At most ``size`` blocks at once across every process; see the module header."""
    return Concurrent(name, size, lock_timeout=lock_timeout, wait_timeout=wait_timeout)


def window(name: str, count: int, per: float | str, *, wait_timeout: float = 5.0) -> Window:
    """At most ``count`` blocks entered in any span of ``per`` seconds; see the module header."""
    return Window(name, count, per, wait_timeout=wait_timeout)


def bucket(name: str, count: int, per: float | str, *, wait_timeout: float = 5.0) -> Bucket:
    """At most ``count`` blocks entered per clock-aligned interval of ``per`` seconds."""
    return Bucket(name, count, per, wait_timeout=wait_timeout)


_queue_limiters: dict[tuple[str, int], Concurrent] = {}


def queue_limits_problem(value: object) -> str | None:
    """What is wrong with a ``JOBSAPP["QUEUE_LIMITS"]`` value, or None (system check jobsapp.E011;
    the processor refuses to start with it, rather than failing every job of the queue)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"JOBSAPP['QUEUE_LIMITS'] is {value!r}: a dict of queue name -> jobs at once is expected."
    for queue, size in value.items():
        if not isinstance(queue, str) or not queue or isinstance(size, bool) or not isinstance(size, int) or size < 1:
            return f"JOBSAPP['QUEUE_LIMITS'] has {queue!r}: {size!r}; each queue needs a whole number >= 1."
    return None


def queue_limiter(queue: str, size: int) -> Concurrent:
    """The concurrent limiter of ``JOBSAPP["QUEUE_LIMITS"][queue]`` (one per process)."""
    limiter = _queue_limiters.get((queue, size))
    if limiter is None:
        lock_timeout = float(jobs_settings.QUEUE_LIMIT_LOCK_TIMEOUT_SECONDS)
        limiter = _queue_limiters.setdefault((queue, size), Concurrent(keys.queue_limiter(queue), size, lock_timeout=lock_timeout))
    return limiter


def within(limiter: Limiter, call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` run inside ``limiter`` (the processor's QUEUE_LIMITS wrapper)."""

    def limited() -> Any:
        with limiter:
            return call()

    return limited


def reschedule(policy: RetryPolicy, unit: UnitOfWork, item: dict[str, Any], error: OverLimit, *, rng: random.Random) -> float | None:
    """Put a job that hit a limit back in the schedule set, atomically with its ack, and park it
    on a concurrent limiter so the next release wakes it; the run-at time, or None when it was
    rescheduled MAX_RESCHEDULES times already (it then fails)."""
    count = int(item.get(RESCHEDULES_KEY) or 0)
    if count >= MAX_RESCHEDULES:
        return None
    member = {key: value for key, value in item.items() if key not in ("enqueued_at", "at")}
    member[RESCHEDULES_KEY] = count + 1
    refused_by = error.limiter
    if refused_by is None:  # raised by user code by hand: the limiter's hint, as a rate limit
        delay = min(max(error.retry_in_seconds, 0.0) + rng.uniform(0.0, RATE_JITTER_SECONDS), MAX_RESCHEDULE_SECONDS)
    else:
        delay = refused_by.reschedule_delay_seconds(count, error.retry_in_seconds, rng)
    run_at = now() + delay
    policy.file_scheduled(unit, member, run_at)
    parked = None
    if refused_by is not None:
        try:  # the member exactly as the retry policy stored it
            parked = refused_by.park(policy.client, compact_json(member, allow_nan=True))
        except REDIS_ERRORS as exc:  # it comes back at its fallback time instead
            logger.warning("jid=%s could not be parked on %r (%s); it comes back in %.1f s", item.get("jid"), refused_by.name, exc, delay)
    if parked == 1:
        when = f"runs when a slot is released, at the latest in {delay:.1f} s"
    elif parked is not None:  # a slot freed meanwhile (0), or the scheduler already took it (-1)
        when = "a slot freed meanwhile: runs again now"
    else:
        when = f"runs again in {delay:.1f} s"
    logger.info("class=%s jid=%s queue=%s over limit %r: %s", item.get("class"), item.get("jid"), unit.queue, error.name, when)
    return run_at
