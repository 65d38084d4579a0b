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
