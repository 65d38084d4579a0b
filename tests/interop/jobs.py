"""Python job classes the interop tests run in a real ``runworkers`` process.

Each records what it saw on a Redis list (``interop:python:runs``) so the test process, and Ruby,
can check it ran. The worker finds them through ``tests.interop.settings`` (autodiscovery).
"""

from __future__ import annotations

import json
import time

from jobsapp import Job, sidekiq_options
from jobsapp.connection import get_redis

RUNS_KEY = "interop:python:runs"
RELEASE_KEY = "interop:python:release"


class RecordRun(Job):
    """Appends {jid, class, args, kwargs, queue, item} to interop:python:runs."""

    def perform(self, *args, **kwargs):
        record = {
            "jid": self.jid,
            "class": type(self).wire_name(),
            "args": list(args),
            "kwargs": kwargs,
            "queue": self.queue,
            "item": self.item,
            "ran_at": time.time(),
        }
        get_redis().rpush(RUNS_KEY, json.dumps(record))


@sidekiq_options(class_name="Interop::PythonReport")
class RubyStyleName(RecordRun):
    """The same, under a Ruby-style wire name."""


@sidekiq_options(retry=3, backtrace=True)
class AlwaysFails(Job):
    def perform(self, reason):
        raise ValueError(f"python job failed on purpose: {reason}")


@sidekiq_options(retry=0)
class DiesAtOnce(Job):
    def perform(self, reason):
        raise RuntimeError(f"python job died on purpose: {reason}")


class Blocks(Job):
    """Stays busy until the test pushes to interop:python:release (at most 30 s)."""

    def perform(self, label):
        get_redis().blpop([RELEASE_KEY], timeout=30)


class AwaitsRelease(Job):
    """An async job: awaits (on the worker's event loop) until the test pushes to
    interop:python:release (at most 30 s)."""

    async def perform(self, label):
        import asyncio

        for _ in range(300):
            if await asyncio.to_thread(get_redis().lpop, RELEASE_KEY):
                return
            await asyncio.sleep(0.1)
