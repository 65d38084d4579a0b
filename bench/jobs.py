"""Jobs the benchmark runs. Each is as small as a job can be, so the engine is what's measured."""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache

from jobsapp import Job, sidekiq_options
from jobsapp.connection import get_redis

#: The job module's own client, made as a Django user makes one: plain redis-py, its own pool (a
#: socket per thread), none of the engine's lean paths (bench/sidekiq/jobs.rb has a
#: ``ConnectionPool`` of plain ``Redis.new`` clients likewise).
USER_REDIS = redis.Redis.from_url(settings.REDIS_URL)


@sidekiq_options(retry=False)
class NoopJob(Job):
    def perform(self, *args):
        return None


@sidekiq_options(retry=False, queue="latency")
class LatencyProbe(Job):
    """Records enqueue-to-start latency in seconds."""

    def perform(self):
        started = time.time()
        get_redis().rpush("bench:latency", repr(started - float(self.item["enqueued_at"])))


@sidekiq_options(retry=False, queue="scheduled")
class LatenessProbe(Job):
    """Records how late a scheduled job started, in seconds (negative: early)."""

    def perform(self, due):
        get_redis().rpush("bench:lateness", repr(time.time() - float(due)))


# --- the side-by-side jobs (bench/side_by_side.py); bench/sidekiq/jobs.rb has the same bodies ---


def spin(iterations: int) -> int:
    """A fixed CPU loop; the benchmark calibrates ``iterations`` to ~100 us in each language."""
    total = 0
    index = 0
    while index < iterations:
        total += index * index
        index += 1
    return total


@sidekiq_options(retry=False)
class IncrJob(Job):
    """One Redis round trip on the job's own pool connection."""

    def perform(self, *args):
        get_redis().incr("bench:counter")


@sidekiq_options(retry=False)
class SleepJob(Job):
    """A 1 ms I/O wait."""

    def perform(self, *args):
        time.sleep(0.001)


@sidekiq_options(retry=False)
class CpuJob(Job):
    """~100 us of CPU, then one Redis round trip."""

    def perform(self, iterations):
        spin(iterations)
        get_redis().incr("bench:counter")


@sidekiq_options(retry=False)
class LatencyArgumentProbe(Job):
    """Records start minus the enqueue time passed as its argument (as the Ruby probe does)."""

    def perform(self, enqueued_at):
        started = time.time()
        get_redis().rpush("bench:latency", repr(started - float(enqueued_at)))


# --- job bodies as Django users write them (bench/side_by_side.py's "user" kinds) ---


@sidekiq_options(retry=False)
class PlainIncrJob(Job):
    """One ``INCR`` through the module's own plain ``redis.Redis`` client."""

    def perform(self, *args):
        USER_REDIS.incr("bench:counter")


@sidekiq_options(retry=False)
class CacheIncrJob(Job):
    """One django-redis ``cache.incr`` (the key exists: the benchmark sets it before a drain)."""

    def perform(self, *args):
        cache.incr("bench:counter")


@sidekiq_options(retry=False)
class OrmGetJob(Job):
    """One ORM ``get(pk=...)`` of a row the benchmark created."""

    def perform(self, pk):
        User.objects.get(pk=pk)


def spin_for_seconds(seconds: float) -> None:
    """A loop in Python code (where a cancel lands at once), in a frame of its own."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


@sidekiq_options(retry=False, queue="cancel", retain=600)
class CancelProbe(Job):
    """Spins ``seconds`` (bench.cancel_latency cancels it), noting when it started and stopped."""

    def perform(self, token, seconds):
        try:  # the cancel may land as this write returns: the finally still notes the stop
            USER_REDIS.hset("bench:cancel:started", token, time.time())
            spin_for_seconds(seconds)
        finally:
            USER_REDIS.hset("bench:cancel:stopped", token, time.time())
        USER_REDIS.hset("bench:cancel:done", token, 1)


@sidekiq_options(retry=False, queue="cancel", retain=600)
class AsyncCancelProbe(Job):
    """``CancelProbe`` as an async job awaiting in a loop."""

    async def perform(self, token, seconds):
        import asyncio

        try:  # the cancel may land as this write returns: the finally still notes the stop
            USER_REDIS.hset("bench:cancel:started", token, time.time())
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        finally:
            USER_REDIS.hset("bench:cancel:stopped", token, time.time())
        USER_REDIS.hset("bench:cancel:done", token, 1)


# --- priorities (bench/priorities.py) ------------------------------------------------------


@sidekiq_options(retry=False, queue="prio")
class BusyJob(Job):
    """Holds its thread for ``seconds`` (the low-priority work a busy worker is doing)."""

    def perform(self, seconds):
        time.sleep(seconds)


@sidekiq_options(retry=False, queue="prio")
class PriorityProbe(Job):
    """Records push-to-start latency in seconds (``pushed_at`` is the producer's clock)."""

    def perform(self, pushed_at):
        get_redis().rpush("bench:priority", repr(time.time() - float(pushed_at)))
