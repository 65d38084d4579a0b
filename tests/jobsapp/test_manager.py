"""The manager in-process: a real fetch on the test Redis, a real processor, test jobs that hold
a thread until the test opens their gate (tests/testapp/jobs.py ``Hold``). No subprocess, and no
test sleeps for the behaviour it checks: each waits for a condition, with a generous deadline.

Only the manager's public calls (start, quiet, stop, busy) and Redis are looked at, so the
manager's insides can change under these tests."""

from __future__ import annotations

import datetime as dt
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis as redis_lib

from jobsapp import connection, keys, middleware
from jobsapp.connection import get_redis
from jobsapp.scripts import Acknowledged
from jobsapp.worker.aio import AsyncLane
from jobsapp.worker.fetch import BasicFetch, QueueOrder, ReliableFetch, UnitOfWork
from jobsapp.worker.heartbeat import new_identity
from jobsapp.worker.manager import Manager
from jobsapp.worker.processor import Processor, Result
from jobsapp.worker.retry import RetryPolicy
from tests.testapp.jobs import RAN_KEY, AsyncNap, Hold, Noop, Record, gate, open_every_gate
from tests.workers import wait_until

STARTED_KEY = "test:started"
#: How long an idle fetch blocks in these tests (quiet unblocks it at once).
BLOCK_SECONDS = 1.0
#: A deadline no healthy test comes near: it only bounds a broken one.
GENEROUS_SECONDS = 20.0


@pytest.fixture(autouse=True)
def _gates_open_after_each_test() -> Iterator[None]:
    yield
    open_every_gate()


def blocking_client() -> redis_lib.Redis:
    return connection.new_redis(blocking_timeout_seconds=BLOCK_SECONDS)


def reliable_fetch(identity: str, fetch_class: type[ReliableFetch] = ReliableFetch) -> ReliableFetch:
    return fetch_class(
        identity,
        QueueOrder.parse(["default"]),
        client=get_redis(),
        blocking_client=blocking_client(),
        rng=random.Random(7),
        make_blocking_client=blocking_client,
    )


def basic_fetch() -> BasicFetch:
    return BasicFetch(QueueOrder.parse(["default"]), client=get_redis(), make_blocking_client=blocking_client, rng=random.Random(7))


def manager_on(
    fetch: ReliableFetch | BasicFetch,
    *,
    concurrency: int,
    batch_size: int = 20,
    processor: Callable[[RetryPolicy], Processor] = Processor,
    async_lane: AsyncLane | None = None,
) -> Manager:
    """A manager as the launcher builds one (launcher.WorkerProcess.build)."""
    stop_event = threading.Event()
    policy = RetryPolicy(get_redis(), fetch.inflight_key, rng=random.Random(7), stop=stop_event)
    return Manager(
        fetch=fetch,
        processor=processor(policy),
        concurrency=concurrency,
        batch_size=batch_size,
        block_seconds=BLOCK_SECONDS,
        stop_event=stop_event,
        async_lane=async_lane,
    )


def push(job_class, *args, **kwargs) -> bytes:
    """Push a job; returns its raw JSON as it sits in its queue."""
    jid = job_class.perform_async(*args, **kwargs)
    for raw in get_redis().lrange(keys.queue("default"), 0, -1):
        if json.loads(raw)["jid"] == jid:
            return bytes(raw)
    raise AssertionError(f"job {jid} is not in its queue")


def listed(redis, key: str) -> list[str]:
    return [value.decode() for value in redis.lrange(key, 0, -1)]


def queued_values(redis) -> list[str]:
    """The first argument of each job in the default queue, in the order workers take them."""
    return [json.loads(raw)["args"][0] for raw in reversed(redis.lrange(keys.queue("default"), 0, -1))]


def eventually(condition: Callable[[], object], *, message: str) -> None:
    wait_until(condition, message=message, timeout_seconds=GENEROUS_SECONDS)


def stop_soon() -> float:
    return time.monotonic() + GENEROUS_SECONDS


class Requeues(middleware.ServerMiddleware):
    """Records each on_requeue (jid, reason) in test:requeued."""

    def on_requeue(self, item, *, reason):
        get_redis().rpush("test:requeued", json.dumps([item["jid"], str(reason)]))


def requeued(redis) -> list[list[str]]:
    return [json.loads(entry) for entry in redis.lrange("test:requeued", 0, -1)]


class AckGate(ReliableFetch):
    """Reliable fetch whose first acknowledgement waits until the test lets it through (a slow
    ack round trip); it records the size of every batch it acknowledges."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.first_ack_may_go = threading.Event()
        self.first_ack_waiting = threading.Event()
        self.batch_sizes: list[int] = []

    def acknowledge(self, units, jids, **kwargs) -> Acknowledged:
        if not self.batch_sizes:
            self.first_ack_waiting.set()
            self.first_ack_may_go.wait(GENEROUS_SECONDS)
        self.batch_sizes.append(len(units))
        return super().acknowledge(units, jids, **kwargs)


class SlowNetworkFetch(ReliableFetch):
    """Reliable fetch 30 ms away from Redis: each round trip takes long next to a short job, so
    the manager's look-ahead is a full batch (a few jobs on a loaded machine)."""

    def take(self, count: int, *, block_seconds: float) -> list[UnitOfWork]:
        time.sleep(0.03)  # the simulated network, not a wait for a behaviour
        return super().take(count, block_seconds=block_seconds)


def test_jobs_run_and_are_acknowledged_in_batches_with_their_counts(redis):
    # Given 30 jobs, and a process whose first acknowledgement is slow to reach Redis
    for index in range(30):
        Record.perform_async(f"job-{index}")
    fetch = reliable_fetch(new_identity(socket.gethostname()), AckGate)
    manager = manager_on(fetch, concurrency=3)
    # When the manager starts
    manager.start()
    try:
        # Then every job runs, and all the jobs that finished while one ack was on its way go in the next one
        eventually(lambda: redis.llen(RAN_KEY) == 30 and not manager.busy(), message="the 30 jobs ran")
        assert fetch.first_ack_waiting.is_set()
        fetch.first_ack_may_go.set()
        eventually(lambda: redis.llen(fetch.inflight_key) == 0, message="every job was acknowledged")
        # (one batch of 30 when all of them finished before the acker first woke)
        assert sum(fetch.batch_sizes) == 30 and len(fetch.batch_sizes) <= 2, fetch.batch_sizes
        # And the counters add up, lifetime and today's
        today = dt.datetime.now(dt.UTC).date()
        assert int(redis.get(keys.STAT_PROCESSED)) == 30 and int(redis.get(keys.stat_processed_daily(today))) == 30
        assert int(redis.get(keys.STAT_FAILED) or 0) == 0
    finally:
        fetch.first_ack_may_go.set()
        stopped_with = manager.stop(stop_soon())
    # Then, stopped, it had nothing running to put back, and every job ran once
    assert stopped_with == 0
    assert sorted(listed(redis, RAN_KEY)) == sorted(f"job-{index}" for index in range(30))
    assert manager.processed_total == 30 and manager.failed_total == 0


def test_quiet_puts_the_buffered_jobs_back_at_the_front_and_fetches_no_more(redis):
    # Given one thread, a fetch of at most 2 jobs 30 ms away from Redis, short jobs first (the
    # look-ahead), then a job that holds the thread, then 8 jobs
    for _ in range(5):
        Noop.perform_async()
    push(Hold, "hold")
    for letter in "abcdefgh":
        Record.perform_async(letter)
    manager = manager_on(reliable_fetch(new_identity(socket.gethostname()), SlowNetworkFetch), concurrency=1, batch_size=2)
    middleware.server_chain().add(Requeues)
    manager.start()
    try:
        # When the thread holds, with jobs fetched for the look-ahead (2, the batch size)
        eventually(lambda: listed(redis, STARTED_KEY) == ["hold"], message="the holding job started")
        eventually(lambda: queued_values(redis) == list("cdefgh"), message="a and b were fetched")
        # And the process is quieted
        manager.quiet()
        # Then the two fetched, unstarted jobs are back at the front of the queue, before the 6 never fetched
        assert queued_values(redis) == list("abcdefgh")
        assert [reason for _, reason in requeued(redis)] == ["quiet", "quiet"]
        assert manager.is_quiet
        # When the holding job then ends and the process stops
        gate("hold").set()
        eventually(lambda: listed(redis, RAN_KEY) == ["hold"], message="the holding job finished")
    finally:
        stopped_with = manager.stop(stop_soon())
    # Then the quiet process took nothing more: the 8 jobs wait in their queue, none in flight
    assert stopped_with == 0
    assert sorted(queued_values(redis)) == list("abcdefgh")
    assert redis.llen(manager.fetch.inflight_key) == 0


def test_quiet_puts_a_full_buffer_back_in_its_original_order(redis):
    # Given one thread holding a job, and a buffer filled behind it up to a batch of 200 jobs (a
    # fetch 30 ms away from Redis and short jobs first: the look-ahead is most of the batch, less
    # on a loaded machine)
    for _ in range(5):
        Noop.perform_async()
    push(Hold, "hold")
    values = [f"{index:03d}" for index in range(250)]
    for value in values:
        Record.perform_async(value)
    manager = manager_on(reliable_fetch(new_identity(socket.gethostname()), SlowNetworkFetch), concurrency=1, batch_size=200)
    manager.start()
    try:
        eventually(lambda: listed(redis, STARTED_KEY) == ["hold"], message="the holding job started")
        readings: list[int] = []

        def buffer_filled() -> bool:  # at least 20 buffered, and no more coming (its fair fetch target reached)
            readings.append(redis.llen(keys.queue("default")))
            return readings[-1] <= 230 and len(readings) >= 5 and len(set(readings[-5:])) == 1

        wait_until(buffer_filled, timeout_seconds=GENEROUS_SECONDS, interval_seconds=0.1, message="the buffer was filled")
        # When the process is quieted
        manager.quiet()
        # Then the buffered jobs are back at the front in the order they were pushed, before those never fetched
        assert queued_values(redis) == values
    finally:
        gate("hold").set()
        manager.stop(stop_soon())


def test_stop_waits_for_running_jobs_until_the_deadline_then_puts_the_rest_back_once(redis, caplog):
    # Given two threads, running a job that will end before the deadline and one that will not
    # (it fails later, after it was put back)
    middleware.server_chain().add(Requeues)
    push(Hold, "finishing")
    stuck = push(Hold, "stuck", fail=True)
    stuck_jid = json.loads(stuck)["jid"]
    manager = manager_on(reliable_fetch(new_identity(socket.gethostname())), concurrency=2)
    before = time.time()
    manager.start()
    stopped_with: list[int] = []
    stopper = threading.Thread(target=lambda: stopped_with.append(manager.stop(time.monotonic() + 3.0)))
    try:
        # Then busy() lists both, with the time each started
        eventually(lambda: len(manager.busy()) == 2, message="both jobs run")
        busy = manager.busy()
        assert sorted(json.loads(entry.unit.raw)["args"][0] for _, entry in busy) == ["finishing", "stuck"]
        assert all(before <= entry.run_at <= time.time() for _, entry in busy)
        # When the process stops with a deadline 3 s away, and one job ends half a second into the wait
        stopper.start()
        eventually(lambda: manager.is_quiet, message="stop quieted the manager")
        time.sleep(0.5)  # the job's own run time, well inside the deadline: not a wait for the behaviour
        gate("finishing").set()
        stopper.join(GENEROUS_SECONDS)
    finally:
        if not stopper.is_alive() and not stopped_with:
            manager.stop(time.monotonic())
    # Then the ended job was waited for and acknowledged, and the other one is back at the front of its queue
    assert stopped_with == [1]
    assert listed(redis, RAN_KEY) == ["finishing"]
    assert int(redis.get(keys.STAT_PROCESSED)) == 1
    assert redis.lrange(keys.queue("default"), 0, -1) == [stuck]
    assert redis.llen(manager.fetch.inflight_key) == 0
    assert requeued(redis) == [[stuck_jid, "shutdown"]]
    # When the job put back then fails in its thread
    gate("stuck").set()
    eventually(
        lambda: any(stuck_jid in record.getMessage() and "fail" in record.getMessage() for record in caplog.records),
        message="the stuck job's failure was handled",
    )
    # Then it is not filed in retry as well: it is in its queue once, and nowhere else
    assert redis.zcard(keys.RETRY) == 0 and redis.zcard(keys.DEAD) == 0
    assert redis.lrange(keys.queue("default"), 0, -1) == [stuck]


def test_a_process_takes_no_more_long_jobs_than_it_has_free_threads(redis):
    # Given a process with two threads, idle
    holds = [push(Hold, f"hold-{index}") for index in range(6)]
    manager = manager_on(reliable_fetch(new_identity(socket.gethostname())), concurrency=2)
    # When six long jobs wait in its queue
    manager.start()
    try:
        eventually(lambda: redis.llen(STARTED_KEY) == 2, message="two jobs started")
        # Then it took only the two its threads run: the four others are left for other processes
        assert sorted(redis.lrange(manager.fetch.inflight_key, 0, -1)) == sorted(holds[:2])
        assert redis.llen(keys.queue("default")) == 4
        # When one of them ends, Then the freed thread takes the next one
        gate("hold-0").set()
        eventually(lambda: redis.llen(STARTED_KEY) == 3, message="a third job started")
        assert listed(redis, STARTED_KEY)[2] == "hold-2"
    finally:
        open_every_gate()
        manager.stop(stop_soon())


class Faulty(Processor):
    """A real processor that raises ``fault`` instead of handling the job whose first argument is
    ``victim``, ``times`` times (then handles it)."""

    def __init__(self, policy: RetryPolicy, *, victim: str, fault: Exception, times: int) -> None:
        super().__init__(policy)
        self.victim = victim
        self.fault = fault
        self.times = times
        self._lock = threading.Lock()

    def process(self, unit: UnitOfWork) -> Result | None:
        if json.loads(unit.raw)["args"][0] == self.victim:
            with self._lock:
                fire = self.times > 0
                self.times -= 1
            if fire:
                raise self.fault
        return super().process(unit)


def test_a_redis_error_around_a_job_puts_it_back_on_its_queue(redis):
    # Given a process whose processor meets Redis refusing a write (OOM) around one job, once
    middleware.server_chain().add(Requeues)
    victim = push(Record, "victim")
    oom = redis_lib.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
    manager = manager_on(
        reliable_fetch(new_identity(socket.gethostname())),
        concurrency=1,
        processor=lambda policy: Faulty(policy, victim="victim", fault=oom, times=1),
    )
    # When it runs
    manager.start()
    try:
        # Then the job went back to its queue, and ran once Redis took writes again
        eventually(lambda: listed(redis, RAN_KEY) == ["victim"], message="the job ran")
        eventually(lambda: redis.llen(manager.fetch.inflight_key) == 0, message="the job was acknowledged")
    finally:
        manager.stop(stop_soon())
    assert requeued(redis) == [[json.loads(victim)["jid"], "error"]]
    # And it was neither filed nor counted as a failure
    assert redis.zcard(keys.RETRY) == 0 and redis.zcard(keys.DEAD) == 0
    assert int(redis.get(keys.STAT_PROCESSED)) == 1 and int(redis.get(keys.STAT_FAILED) or 0) == 0


def test_an_engine_bug_around_a_job_parks_it_in_the_dead_set_and_never_requeues_it(redis):
    # Given a process whose processor fails on one job with an engine bug, every time
    middleware.server_chain().add(Requeues)
    victim = push(Record, "victim")
    Record.perform_async("after")
    manager = manager_on(
        reliable_fetch(new_identity(socket.gethostname())),
        concurrency=1,
        processor=lambda policy: Faulty(policy, victim="victim", fault=RuntimeError("engine bug"), times=1_000),
    )
    # When it runs
    manager.start()
    try:
        # Then the job is parked in the dead set as malformed, its raw text kept, and the next job runs
        eventually(lambda: listed(redis, RAN_KEY) == ["after"], message="the next job ran")
        eventually(lambda: redis.llen(manager.fetch.inflight_key) == 0, message="nothing left in flight")
    finally:
        manager.stop(stop_soon())
    (dead,) = [json.loads(member) for member in redis.zrange(keys.DEAD, 0, -1)]
    assert dead["class"] == "jobsapp.MalformedPayload" and dead["args"] == [victim.decode()]
    assert dead["malformed_reason"] == "could not be handled: RuntimeError: engine bug"
    # And it was never put back (no hot loop), and counted failed once
    assert requeued(redis) == [] and redis.llen(keys.queue("default")) == 0 and redis.zcard(keys.RETRY) == 0
    assert int(redis.get(keys.STAT_PROCESSED)) == 2 and int(redis.get(keys.STAT_FAILED)) == 1


def test_basic_fetch_counts_its_jobs_and_puts_a_running_one_back_at_the_deadline(redis):
    # Given a basic-fetch process with two threads, two short jobs and one that holds its thread
    middleware.server_chain().add(Requeues)
    Record.perform_async("a")
    Record.perform_async("b")
    holding = push(Hold, "holding")
    manager = manager_on(basic_fetch(), concurrency=2)
    manager.start()
    try:
        eventually(
            lambda: listed(redis, STARTED_KEY) == ["holding"] and sorted(listed(redis, RAN_KEY)) == ["a", "b"],
            message="the short jobs ran and the holding one started",
        )
        # When the process stops with a deadline 1 s away
        stopped_with = manager.stop(time.monotonic() + 1.0)
    finally:
        open_every_gate()
    # Then the short jobs were counted, and the holding job is back at the front of its queue
    assert stopped_with == 1
    assert int(redis.get(keys.STAT_PROCESSED)) == 2
    assert redis.lrange(keys.queue("default"), 0, -1) == [holding]
    assert requeued(redis) == [[json.loads(holding)["jid"], "shutdown"]]


def test_stop_cancels_an_async_job_still_running_at_the_deadline_and_puts_it_back(redis):
    # Given a process with an async lane, running an async job that awaits for 30 s, and a short one
    middleware.server_chain().add(Requeues)
    long_nap = push(AsyncNap, 30, "long")
    AsyncNap.perform_async(0.01, "short")
    lane = AsyncLane(concurrency=2)
    manager = manager_on(
        reliable_fetch(new_identity(socket.gethostname())),
        concurrency=1,
        processor=lambda policy: Processor(policy, async_lane=lane),
        async_lane=lane,
    )
    before = set(threading.enumerate())
    manager.start()
    seen: dict[str, object] = {}

    def both_started() -> bool:
        seen.update(ran=listed(redis, RAN_KEY), started=sorted(listed(redis, STARTED_KEY)))
        return seen["ran"] == ["short"] and seen["started"] == ["long", "short"]

    try:
        try:
            eventually(both_started, message="both started")
        except AssertionError as exc:  # what the process was doing, for a failure on a loaded machine
            queued = redis.llen(keys.queue("default"))
            in_flight = redis.llen(manager.fetch.inflight_key)
            raise AssertionError(f"{exc}; last seen {seen}, queued {queued}, in flight {in_flight}, busy {manager.busy()}") from None
        (loop_thread,) = [thread for thread in set(threading.enumerate()) - before if thread.name == "jobsapp.event-loop"]
    finally:
        # When the process stops with a deadline 1 s away
        stopped_with = manager.stop(time.monotonic() + 1.0)
    # Then the long job was cancelled in its coroutine and put back at the front of its queue, once
    assert stopped_with == 1
    assert listed(redis, "test:cancelled") == ["long"]
    assert redis.lrange(keys.queue("default"), 0, -1) == [long_nap]
    assert requeued(redis) == [[json.loads(long_nap)["jid"], "shutdown"]]
    assert redis.zcard(keys.RETRY) == 0 and redis.llen(manager.fetch.inflight_key) == 0
    # And the short one was acknowledged, and the lane's loop has stopped
    assert int(redis.get(keys.STAT_PROCESSED)) == 1
    assert not loop_thread.is_alive()


class ThreadNoting(ReliableFetch):
    """Reliable fetch that notes which thread each blocking fetch returned a job to; with
    ``fail_blocking`` its first blocking fetch moves a job in flight and then raises, as a fetch
    whose reply was lost to a timeout."""

    def __init__(self, *args, fail_blocking: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.blocking_receivers: list[str] = []
        self.fail_blocking = fail_blocking

    def take(self, count: int, *, block_seconds: float) -> list[UnitOfWork]:
        units = super().take(count, block_seconds=block_seconds)
        if units and block_seconds > 0:
            if self.fail_blocking:
                self.fail_blocking = False
                raise redis_lib.exceptions.TimeoutError("the reply was lost")
            self.blocking_receivers.append(threading.current_thread().name)
        return units


class ThreadRecording(Processor):
    """A real processor that records, per job (first argument), the thread it ran in."""

    def __init__(self, policy: RetryPolicy) -> None:
        super().__init__(policy)
        self.ran_in: dict[str, str] = {}

    def process(self, unit: UnitOfWork) -> Result | None:
        self.ran_in[json.loads(unit.raw)["args"][0]] = threading.current_thread().name
        return super().process(unit)


def blocked_in_fetch(redis) -> bool:
    """Whether a connection is blocked in BLMOVE (the process waits for a push)."""
    return any(client.get("cmd") == "blmove" and "b" in client.get("flags", "") for client in redis.client_list())


def test_an_idle_process_runs_a_pushed_job_in_the_thread_that_received_it(redis):
    # Given an idle process: every queue empty, so it blocks in the fetch
    fetch = reliable_fetch(new_identity(socket.gethostname()), ThreadNoting)
    assert isinstance(fetch, ThreadNoting)
    manager = manager_on(fetch, concurrency=3, processor=ThreadRecording)
    manager.start()
    try:
        eventually(lambda: blocked_in_fetch(redis), message="the process blocks in the fetch")
        # When a job is pushed
        Record.perform_async("pushed")
        eventually(lambda: listed(redis, RAN_KEY) == ["pushed"], message="the pushed job ran")
        # Then the processor thread that received it from the blocking fetch ran it (no hand-off)
        processor = manager.processor
        assert isinstance(processor, ThreadRecording)
        assert fetch.blocking_receivers[:1] == [processor.ran_in["pushed"]]
        assert processor.ran_in["pushed"].startswith("jobsapp.processor-")
        # And it was acknowledged
        eventually(lambda: redis.llen(fetch.inflight_key) == 0, message="the job was acknowledged")
    finally:
        manager.stop(stop_soon())


def test_a_blocking_fetch_whose_reply_was_lost_leaves_nothing_stranded_in_flight(redis):
    # Given an idle process whose blocking fetch moves a job in flight but loses the reply once
    fetch = reliable_fetch(new_identity(socket.gethostname()), ThreadNoting)
    assert isinstance(fetch, ThreadNoting)
    fetch.fail_blocking = True
    manager = manager_on(fetch, concurrency=2)
    manager.start()
    try:
        eventually(lambda: blocked_in_fetch(redis), message="the process blocks in the fetch")
        # When a job is pushed
        Record.perform_async("lost")
        # Then the process reconciles its in-flight list: the job goes back to its queue and runs once
        eventually(lambda: listed(redis, RAN_KEY) == ["lost"], message="the job whose reply was lost ran")
        eventually(lambda: redis.llen(fetch.inflight_key) == 0, message="nothing is left in flight")
        assert not fetch.fail_blocking
    finally:
        manager.stop(stop_soon())
    assert listed(redis, RAN_KEY) == ["lost"]
