"""Rate and concurrency limits shared by every process and host: ``jobsapp.limiter``.

    API = limiter.concurrent("partner-api", 3, lock_timeout=30)

    class SyncPartner(Job):
        def perform(self, account_id):
            with API:                      # or: with limiter.window("mail", 10, 1): ...
                call_the_partner(account_id)

Three kinds, as Sidekiq Enterprise's, each one Lua script judged by the Redis server's clock:

- ``concurrent(name, size, lock_timeout=30, wait_timeout=5)``: at most ``size`` holders at once.
  A holder is released when its block ends, or after ``lock_timeout`` seconds if its process
  died (or the block runs longer: keep ``lock_timeout`` above the work's duration).
- ``window(name, count, per)``: at most ``count`` entries in any span of ``per`` seconds (a
  sliding window: no burst of 2 x count across a boundary, unlike fixed windows).
- ``bucket(name, count, per)``: at most ``count`` per clock-aligned interval of ``per`` seconds.

``per`` is seconds, or "second", "minute", "hour", "day". Entering waits up to ``wait_timeout``
seconds (default 5; 0 to never wait) for room, sleeping as long as the script says room may take,
then raises ``OverLimit``. Raised out of ``perform``, OverLimit is not a failure: the processor
puts the job back in the schedule set with backoff (``reschedule``, atomically with its ack), not
counted failed, not a retry; after ``MAX_RESCHEDULES`` it fails like any exception and is retried
(so a limit that can never be met ends in the dead set, not in an endless loop).

``JOBSAPP["QUEUE_LIMITS"] = {"imports": 2}`` caps the jobs of a queue running at once across
every process, with no code: the processor wraps those jobs in ``concurrent("queue:<name>")``,
whose ``lock_timeout`` is ``QUEUE_LIMIT_LOCK_TIMEOUT_SECONDS`` (600 s: the slot of a worker killed
mid-job frees after that long; keep it above the longest job of a capped queue).

Keys: keys.LIMITERS, keys.limiter(name), keys.limiter_holders(name). Limiter objects hold no
per-use state on ``self`` (entered permits live in a ContextVar: per thread, per asyncio task), so
one module-level limiter serves every thread and task; nesting the same limiter takes two slots.
``async with limiter:`` works too, waiting in a thread so the event loop is not blocked.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import time
from collections.abc import Callable
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import keys, scripts
from .connection import get_redis
from .errors import JobsError

if TYPE_CHECKING:
    import redis

    from .fetch import UnitOfWork
    from .retry import RetryPolicy

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


class OverLimit(JobsError):
    """A limiter had no room within its wait_timeout. Raised out of ``perform``, the job is put
    back in the schedule set with backoff (not a failure, not a retry), up to MAX_RESCHEDULES."""

    def __init__(self, name: str, retry_in_seconds: float) -> None:
        super().__init__(f"over the limit of {name!r}; room expected in {retry_in_seconds:.2f} s")
        self.name = name
        self.retry_in_seconds = retry_in_seconds


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


class Permit:
    """What ``with limiter:`` gives: when the slot or admission was granted (server clock)."""

    __slots__ = ("acquired_at", "token")

    def __init__(self, token: str, acquired_at: float) -> None:
        self.token = token
        self.acquired_at = acquired_at


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

    def _try(self, client: redis.Redis, token: str) -> tuple[bool, float]:
        """One attempt: (granted, server time if granted else seconds until room may come)."""
        raise NotImplementedError

    def _release(self, client: redis.Redis, permit: Permit) -> None:
        """Give back what ``_try`` took (nothing for rate limiters)."""

    def describe(self) -> dict[str, str]:
        """The limiter's settings, as stored for the dashboard."""
        raise NotImplementedError

    def _poll_seconds(self, hint_seconds: float) -> float:
        return hint_seconds

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
        token = os.urandom(8).hex()
        deadline = time.monotonic() + self.wait_timeout
        while True:
            granted, value = self._try(client, token)
            if granted:
                return Permit(token, value)
            remaining = deadline - time.monotonic()
            wait = self._poll_seconds(value)
            if remaining <= 0 or (wait >= value and value > remaining):  # no room before the deadline
                raise OverLimit(self.name, max(value, 0.0))
            time.sleep(min(wait, remaining) * self.rng.uniform(1.0, 1.1) + 0.0005)

    def release(self, permit: Permit, client: redis.Redis | None = None) -> None:
        self._release(client or get_redis(), permit)

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

    def _try(self, client: redis.Redis, token: str) -> tuple[bool, float]:
        granted, value = scripts.limiter_concurrent(
            client, name=self.name, token=token, size=self.size, lock_timeout_seconds=self.lock_timeout
        )
        return bool(int(granted)), float(value)

    def _release(self, client: redis.Redis, permit: Permit) -> None:
        client.zrem(keys.limiter_holders(self.name), permit.token)

    def _poll_seconds(self, hint_seconds: float) -> float:
        # a slot frees when any holder's block ends, which nobody announces: ask again soon
        return min(hint_seconds, CONCURRENT_POLL_SECONDS)

    def describe(self) -> dict[str, str]:
        return {"kind": self.kind, "limit": str(self.size), "lock_timeout": repr(self.lock_timeout)}


class Window(Limiter):
    kind = "window"

    def __init__(self, name: str, count: int, per: float | str, *, wait_timeout: float = 5.0, rng: random.Random | None = None) -> None:
        super().__init__(name, wait_timeout=wait_timeout, rng=rng)
        self.count = _positive_int(count, "count")
        self.per_seconds = _seconds(per)

    def _try(self, client: redis.Redis, token: str) -> tuple[bool, float]:
        granted, value = scripts.limiter_window(client, name=self.name, token=token, count=self.count, per_seconds=self.per_seconds)
        return bool(int(granted)), float(value)

    def describe(self) -> dict[str, str]:
        return {"kind": self.kind, "limit": str(self.count), "per_seconds": repr(self.per_seconds)}


class Bucket(Limiter):
    kind = "bucket"

    def __init__(self, name: str, count: int, per: float | str, *, wait_timeout: float = 5.0, rng: random.Random | None = None) -> None:
        super().__init__(name, wait_timeout=wait_timeout, rng=rng)
        self.count = _positive_int(count, "count")
        self.per_seconds = _seconds(per)

    def _try(self, client: redis.Redis, token: str) -> tuple[bool, float]:
        granted, value = scripts.limiter_bucket(client, name=self.name, count=self.count, per_seconds=self.per_seconds)
        return bool(int(granted)), float(value)

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
    from .conf import jobs_settings

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


def reschedule_delay_seconds(reschedules: int, hint_seconds: float, rng: random.Random) -> float:
    """How long a job over a limit waits: the limiter's hint, growing with each reschedule, jittered."""
    base = max(hint_seconds, 1.0) + reschedules * 2.0
    return min(base * rng.uniform(1.0, 1.5), MAX_RESCHEDULE_SECONDS)


def reschedule(policy: RetryPolicy, unit: UnitOfWork, item: dict[str, Any], error: OverLimit, *, rng: random.Random) -> float | None:
    """Put a job that hit a limit back in the schedule set, atomically with its ack; the run-at
    time, or None when it was rescheduled MAX_RESCHEDULES times already (it then fails)."""
    from .payload import now

    count = int(item.get(RESCHEDULES_KEY) or 0)
    if count >= MAX_RESCHEDULES:
        return None
    member = {key: value for key, value in item.items() if key not in ("enqueued_at", "at")}
    member[RESCHEDULES_KEY] = count + 1
    run_at = now() + reschedule_delay_seconds(count, error.retry_in_seconds, rng)
    policy.file_scheduled(unit, member, run_at)
    return run_at
