"""Jobs the benchmark runs. Each is as small as a job can be, so the engine is what's measured."""

from __future__ import annotations

import time

from jobsapp import Job, sidekiq_options
from jobsapp.connection import get_redis


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
