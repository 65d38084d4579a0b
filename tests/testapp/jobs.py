"""Job classes the engine tests enqueue and run (registered on import)."""

from __future__ import annotations

import logging

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

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

from jobsapp import NoRetryError  # noqa: E402
from jobsapp.connection import get_redis  # noqa: E402

RAN_KEY = "test:ran"


class Record(Job):
    """Appends its first argument to the test:ran list."""

    def perform(self, value, *, extra=None):
        get_redis().rpush(RAN_KEY, value if extra is None else f"{value}:{extra}")


@sidekiq_options(priority=20)
class Prioritised(Job):
    """Records like Record; its pushes have priority 20 unless set() says otherwise."""

    def perform(self, value):
        get_redis().rpush(RAN_KEY, value)


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


# --- unique jobs (tests/jobsapp/test_unique.py) ------------------------------------------


@sidekiq_options(unique_for=60)
class UniqueRecord(Job):
    """Unique until success; records its argument, or raises when told to."""

    def perform(self, value, *, fail=False):
        if fail:
            raise RuntimeError("failing unique job")
        get_redis().rpush(RAN_KEY, value)


@sidekiq_options(unique_for=60, unique_until="start")
class UniqueUntilStart(Job):
    """Unique until start; records whether its own lock was still held while it ran."""

    def perform(self, value):
        held = get_redis().exists(f"jobsapp:unique:{self.item['unique_digest']}")
        get_redis().rpush(RAN_KEY, f"{value}:held={held}")


# --- hostile payloads (tests/security/test_hostile_*.py) ---------------------------------


class RecordThenExplode(Job):
    """Records each run in test:ran, then fails: how often it ran shows a hot loop."""

    def perform(self, value="explode"):
        get_redis().rpush(RAN_KEY, value)
        raise ValueError(f"{value} failed on purpose")


class Rendezvous(Job):
    """Waits (up to 10 s) until ``size`` jobs of this key run at once, then records "met:<key>":
    ``size`` of them meeting proves ``size`` processor threads are alive."""

    def perform(self, key, size):
        connection = get_redis()
        connection.incr(key)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if int(connection.get(key) or 0) >= size:
                connection.rpush(RAN_KEY, f"met:{key}")
                return
            time.sleep(0.02)
        connection.rpush(RAN_KEY, f"alone:{key}")


# --- limiters (tests/jobsapp/test_limiter.py) --------------------------------------------

from jobsapp import limiter  # noqa: E402

API_CONCURRENT = limiter.concurrent("api", 3, lock_timeout=30)
API_WINDOW = limiter.window("api-window", 10, 1)
HELD_ELSEWHERE = limiter.concurrent("held-elsewhere", 1, wait_timeout=0)


class UnderConcurrentLimit(Job):
    """Counts how many of its kind run inside the limiter at once (test:limiter:peaks)."""

    def perform(self, index):
        connection = get_redis()
        with API_CONCURRENT:
            connection.rpush("test:limiter:peaks", connection.incr("test:limiter:running"))
            time.sleep(0.02)
            connection.decr("test:limiter:running")
        connection.rpush(RAN_KEY, index)


class UnderWindowLimit(Job):
    """Records the server time at which the window admitted it (test:limiter:starts)."""

    def perform(self, index):
        with API_WINDOW as permit:
            get_redis().rpush("test:limiter:starts", repr(permit.acquired_at))


class QueueCapped(Job):
    """Counts how many run at once; JOBSAPP["QUEUE_LIMITS"] caps its queue, not its code."""

    def perform(self, index):
        connection = get_redis()
        connection.rpush("test:limiter:capped_peaks", connection.incr("test:limiter:capped_running"))
        time.sleep(0.02)
        connection.decr("test:limiter:capped_running")


class NeedsHeldLimiter(Job):
    def perform(self):
        with HELD_ELSEWHERE:
            get_redis().rpush(RAN_KEY, "got in")


# --- batch callbacks (tests/tracking/test_callbacks.py) -------------------------------------


@sidekiq_options(queue="callbacks")
class OnComplete(Job):
    """Records each call in Redis (test:callbacks), so worker tests can count them."""

    def perform(self, task_id, counts):
        from jobsapp.connection import get_redis

        get_redis().rpush("test:callbacks", f"complete:{task_id}:{counts['total']}:{counts['finish']}")


@sidekiq_options(queue="callbacks")
class OnSuccess(Job):
    def perform(self, task_id, counts):
        from jobsapp.connection import get_redis

        get_redis().rpush("test:callbacks", f"success:{task_id}:{counts['total']}")


class Nap(Job):
    """Sleeps without touching Redis: keeps a worker busy while Redis is frozen."""

    def perform(self, seconds):
        time.sleep(seconds)


# --- Redis-only batches (tests/jobsapp/test_batch.py) -------------------------------------


class BatchMember(Job):
    """Records its value (test:ran), or fails when told to."""

    def perform(self, value, *, fail=False):
        if fail:
            raise RuntimeError(f"batch member {value} failed")
        get_redis().rpush(RAN_KEY, value)


@sidekiq_options(queue="callbacks")
class BatchComplete(Job):
    def perform(self, bid, counts):
        get_redis().rpush("test:batch_callbacks", json.dumps(["complete", bid, counts], sort_keys=True))


@sidekiq_options(queue="callbacks")
class BatchSuccess(Job):
    def perform(self, bid, counts):
        get_redis().rpush("test:batch_callbacks", json.dumps(["success", bid, counts], sort_keys=True))


@sidekiq_options(queue="callbacks", priority=30)
class PrioritisedBatchDone(Job):
    """A batch callback declared with a priority: records its run (test:ran)."""

    def perform(self, bid, counts):
        get_redis().rpush(RAN_KEY, f"callback:{counts['succeeded']}")


# --- timeouts (tests/jobsapp/test_timeouts.py) --------------------------------------------


@sidekiq_options(retry=3)
class Spin(Job):
    """Busy in Python code for ``seconds`` (interruptible by JobTimeout), then records ``value``."""

    def perform(self, seconds, value):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            pass
        get_redis().rpush(RAN_KEY, value)


@sidekiq_options(retry=3)
class BlockInC(Job):
    """Blocks in one C call (``select``: JobTimeout cannot interrupt it), then records ``value``."""

    def perform(self, seconds, value):
        import select

        get_redis().rpush("test:started", f"{value}:{os.getpid()}")
        select.select([], [], [], seconds)
        get_redis().rpush(RAN_KEY, value)


class SleepWhere(Job):
    """Records ``value:pid`` when it starts, sleeps, then records ``value``."""

    def perform(self, seconds, value):
        get_redis().rpush("test:started", f"{value}:{os.getpid()}")
        time.sleep(seconds)
        get_redis().rpush(RAN_KEY, value)


# --- async jobs (tests/jobsapp/test_async.py) ----------------------------------------------

import asyncio  # noqa: E402
import threading  # noqa: E402

from jobsapp.middleware import ServerMiddleware  # noqa: E402


class AsyncNap(Job):
    """Awaits ``seconds`` on the worker's event loop, then records its value (test:ran)."""

    async def perform(self, seconds, value):
        await asyncio.to_thread(get_redis().rpush, "test:started", value)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            await asyncio.to_thread(get_redis().rpush, "test:cancelled", value)
            raise
        await asyncio.to_thread(get_redis().rpush, RAN_KEY, value)


@sidekiq_options(retry=3, backtrace=True)
class AsyncExplode(Job):
    async def perform(self, message):
        await asyncio.sleep(0)
        raise ValueError(message)


@sidekiq_options(use_task_event=True)
class TrackedAsync(Job):
    async def perform(self, value):
        await asyncio.sleep(0.01)
        return value


class AsyncSyncToAsync(Job):
    """Calls sync code the Django way; records the thread it ran in next to the loop's thread."""

    async def perform(self, value):
        from asgiref.sync import sync_to_async

        loop_thread = threading.current_thread().name
        sync_thread = await sync_to_async(lambda: threading.current_thread().name)()
        get_redis().rpush("test:threads", json.dumps([value, loop_thread, sync_thread]))


class RecordsChain(ServerMiddleware):
    """Records, per job, the class, the thread running the chain and what the chain saw."""

    def call(self, job, item, queue, call_next):
        seen = {"class": item["class"], "thread": threading.current_thread().name}
        try:
            result = call_next()
        except Exception as exc:
            seen["raised"] = type(exc).__name__
            raise
        finally:
            get_redis().rpush("test:chain", json.dumps(seen))
        return result


class AsyncBlockingCall(Job):
    """Awaits a blocking call run in a thread (asyncio.to_thread), as a job should call blocking code."""

    async def perform(self, seconds, value):
        await asyncio.to_thread(get_redis().rpush, "test:started", value)
        await asyncio.to_thread(time.sleep, seconds)
        await asyncio.to_thread(get_redis().rpush, RAN_KEY, value)


@sidekiq_options(expires_in=30)
class ExpiringRecord(Record):
    """Record, with 30 s to start (tests/jobsapp/test_expiry.py)."""


class AsyncOrmCount(Job):
    """Counts users with Django's async ORM and records the count (test:orm)."""

    async def perform(self):
        from django.contrib.auth.models import User

        count = await User.objects.acount()
        await asyncio.to_thread(get_redis().rpush, "test:orm", count)


# --- in-process manager tests (tests/jobsapp/test_manager.py) ------------------------------

#: value -> the gate a Hold job of that value waits at (an Event of the test's own process).
GATES: dict[str, threading.Event] = {}
_GATES_LOCK = threading.Lock()


def gate(value: str) -> threading.Event:
    """The gate of the Hold jobs of ``value`` (created closed on first use)."""
    with _GATES_LOCK:
        return GATES.setdefault(value, threading.Event())


def open_every_gate() -> None:
    """Let every Hold job go (a test's clean-up: no thread is left waiting)."""
    with _GATES_LOCK:
        for event in GATES.values():
            event.set()
        GATES.clear()


class Hold(Job):
    """Records its value in test:started, waits (at most 30 s) until the test opens its gate,
    then records it in test:ran, or raises when told to. In-process only: a gate is an Event of
    the test's process, so a test decides when a job that holds a thread ends."""

    def perform(self, value, *, fail=False):
        get_redis().rpush("test:started", value)
        gate(value).wait(30)
        if fail:
            raise RuntimeError(f"{value} failed after its gate opened")
        get_redis().rpush(RAN_KEY, value)


class LogsThroughItsOwnLogger(Job):
    """Logs a line through a logger of its own (not jobsapp's), as users' jobs do."""

    def perform(self, text):
        logging.getLogger("tests.testapp.billing").info("charged %s", text)


class AsyncLogsThroughItsOwnLogger(Job):
    """An async job logging through a logger of its own, on the worker's event loop."""

    async def perform(self, text):
        await asyncio.sleep(0)
        logging.getLogger("tests.testapp.billing").info("charged %s", text)
