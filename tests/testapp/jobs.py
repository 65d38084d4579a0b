"""Job classes the engine tests enqueue and run (registered on import)."""

from __future__ import annotations

from jobsapp import Job, sidekiq_options


class Noop(Job):
    def perform(self, *args, **kwargs):
        return None


@sidekiq_options(queue="imports", retry=5, use_task_event=True, tags=["etl"])
class ImportRow(Job):
    def perform(self, row_id, *, dry_run=False):
        return row_id


@sidekiq_options(class_name="HardWorker")
class HardWorker(Job):
    def perform(self, name, count):
        return None


# --- jobs the worker tests run: each records what happened in Redis ----------------------

import os  # noqa: E402
import time  # noqa: E402

from jobsapp import NoRetryError  # noqa: E402
from jobsapp.connection import get_redis  # noqa: E402

RAN_KEY = "test:ran"


class Record(Job):
    """Appends its first argument to the test:ran list."""

    def perform(self, value, *, extra=None):
        get_redis().rpush(RAN_KEY, value if extra is None else f"{value}:{extra}")


@sidekiq_options(retry=2, backtrace=True)
class Explode(Job):
    def perform(self, message="boom"):
        raise ValueError(message)


@sidekiq_options(retry=False)
class ExplodeNoRetry(Job):
    def perform(self):
        raise RuntimeError("no retry for me")


@sidekiq_options(retry=0)
class ExplodeToDead(Job):
    def perform(self):
        raise RuntimeError("straight to the morgue")


class Refuse(Job):
    def perform(self):
        raise NoRetryError("seller not qualified")


class Sleep(Job):
    """Sleeps, then records; used to hold a processor busy."""

    def perform(self, seconds, value):
        get_redis().rpush("test:started", value)
        time.sleep(seconds)
        get_redis().rpush(RAN_KEY, value)


class CustomDelay(Job):
    @classmethod
    def sidekiq_retry_in(cls, count, exception):
        return 3600 * (count + 1)

    def perform(self):
        raise KeyError("custom")


class Crash(Job):
    """Kills its own process (a segfault's effect) the first times it runs."""

    def perform(self, value):
        os._exit(1)


class NeedsArgumentsToBuild(Job):
    """A job whose __init__ cannot be called the way a worker builds jobs."""

    def __init__(self, client):
        self.client = client

    def perform(self):
        return None


class UnprintableError(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")


class RaisesUnprintable(Job):
    def perform(self):
        raise UnprintableError()


class RaisesKeyboardInterrupt(Job):
    def perform(self):
        raise KeyboardInterrupt
