"""The heartbeat in-process, on a manual clock: no test waits for the 5 s interval it tests."""

from __future__ import annotations

import logging

from jobsapp import keys
from jobsapp.connection import get_redis
from jobsapp.worker.heartbeat import Heartbeat
from jobsapp.worker.launcher import Components, WorkerOptions, WorkerProcess
from jobsapp.worker.recovery import recover_list
from tests.manual_clock import ManualClock
from tests.redis_down import unreachable_redis


def built(clock: ManualClock) -> tuple[WorkerProcess, Components]:
    """A worker process's components, built by the launcher's own build step, none started."""
    process = WorkerProcess(WorkerOptions(concurrency=2), clock=clock)
    return process, process.build(get_redis())


def test_the_first_beat_is_at_start_then_one_per_interval_and_two_make_a_judge(redis):
    # Given a heartbeat on a manual clock
    clock = ManualClock()
    process, components = built(clock)
    heartbeat = components.heartbeat
    interval = heartbeat.interval_seconds
    # When it starts
    heartbeat.start()
    try:
        # Then the process is listed at once, beating the clock's time, and the thread waits one interval
        assert redis.sismember(keys.PROCESSES, process.identity)
        assert float(redis.hget(keys.process(process.identity), "beat")) == clock.time()
        clock.settle(1)
        assert clock.waits == [interval]
        assert heartbeat.consecutive_beats == 1 and not heartbeat.ready_to_judge()
        # When one interval passes
        clock.advance_and_settle(interval)
        # Then it beat again, and may now call other processes dead
        assert float(redis.hget(keys.process(process.identity), "beat")) == clock.time()
        assert heartbeat.consecutive_beats == 2 and heartbeat.ready_to_judge()
    finally:
        heartbeat.stop()
    # When no beat comes for more than two intervals (a stalled process or Redis)
    clock.advance(2 * interval + 1)
    # Then it may not judge, and the next beat starts counting again
    assert not heartbeat.ready_to_judge()
    heartbeat.beat()
    assert heartbeat.consecutive_beats == 1 and not heartbeat.ready_to_judge()


def test_after_a_stalled_beat_it_judges_no_one_until_a_ttl_has_passed(redis):
    # Given a heartbeat on a manual clock that may judge (two beats in a row)
    clock = ManualClock()
    _process, components = built(clock)
    heartbeat = components.heartbeat
    interval, ttl = heartbeat.interval_seconds, heartbeat.ttl_seconds
    heartbeat.beat()
    clock.advance(interval)
    heartbeat.beat()
    assert heartbeat.ready_to_judge()
    # When a beat stalls past the TTL (a frozen Redis: every process's key expired meanwhile)
    clock.advance(ttl + interval)
    heartbeat.beat()
    ended_at = clock.monotonic()
    # Then two beats in a row are not enough: it waits a TTL from the outage's end, beating
    # every interval, the time a live process slow to beat again has to do so
    while clock.monotonic() + interval < ended_at + ttl:
        clock.advance(interval)
        heartbeat.beat()
        assert heartbeat.consecutive_beats >= 2 and not heartbeat.ready_to_judge()
    clock.advance(ended_at + ttl - clock.monotonic())
    heartbeat.beat()
    assert heartbeat.ready_to_judge()


def test_a_signal_pushed_by_a_dashboard_arrives_with_the_next_beat(redis):
    # Given a started heartbeat
    clock = ManualClock()
    process, components = built(clock)
    components.heartbeat.start()
    try:
        clock.settle(1)
        # When a UI pushes TSTP to the process's signals list and an interval passes
        redis.lpush(keys.signals(process.identity), "TSTP")
        clock.advance_and_settle(components.heartbeat.interval_seconds)
        # Then the process is asked to quiet, and the signal is taken off the list
        process._handle_pending_signals()
        assert process.quiet_requested.is_set()
        assert redis.llen(keys.signals(process.identity)) == 0
    finally:
        components.heartbeat.stop()


def test_an_outage_is_logged_once_and_its_end_once_with_the_failed_beats(redis, caplog):
    # Given a heartbeat whose Redis does not answer
    caplog.set_level(logging.INFO, logger="jobsapp.heartbeat")
    clock = ManualClock()
    process, components = built(clock)
    heartbeat = Heartbeat(
        client=unreachable_redis(),
        identity=process.identity,
        info={"concurrency": 2},
        manager=components.manager,
        interval_seconds=5.0,
        ttl_seconds=60,
        on_signal=process.on_signal,
        reliable=True,
        clock=clock,
    )
    # When it starts and two more intervals pass
    heartbeat.start()
    try:
        clock.settle(1)
        clock.advance_and_settle(5.0)
        clock.advance_and_settle(5.0)
        # Then it kept its interval (no faster retries), counts no beat, and warned once
        assert clock.waits == [5.0, 5.0, 5.0]
        assert heartbeat.consecutive_beats == 0
        warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
        assert len(warnings) == 1 and warnings[0].startswith("heartbeat: Redis unavailable"), warnings
        # When Redis answers again
        heartbeat.client = get_redis()
        clock.advance_and_settle(5.0)
    finally:
        heartbeat.stop()
    # Then one line says it is back after the three failed beats
    back = [record.getMessage() for record in caplog.records if "is back" in record.getMessage()]
    assert back == ["heartbeat: Redis is back after 3 failed attempts"]
    assert redis.sismember(keys.PROCESSES, process.identity)


def fenced_heartbeat(clock: ManualClock) -> tuple[WorkerProcess, Heartbeat, list[str]]:
    """A started heartbeat whose fencing is recorded (the launcher's would end the process)."""
    process, components = built(clock)
    reasons: list[str] = []
    components.heartbeat.on_fenced = reasons.append
    components.heartbeat.start()
    clock.settle(1)
    return process, components.heartbeat, reasons


def test_a_process_that_did_not_run_for_longer_than_the_ttl_fences_itself_without_beating(redis):
    # Given a beating process
    clock = ManualClock()
    process, heartbeat, reasons = fenced_heartbeat(clock)
    try:
        clock.advance_and_settle(heartbeat.interval_seconds)
        assert reasons == []
        last_beat = redis.hget(keys.process(process.identity), "beat")
        # When its heartbeat thread does not run for longer than the TTL (SIGSTOP, a frozen VM)
        clock.advance_and_settle(heartbeat.ttl_seconds + 1)
        # Then it is fenced once, with the reason, and beats no more under this identity
        assert len(reasons) == 1 and "did not run for 61.0 s, past its heartbeat TTL of 60 s" in reasons[0]
        clock.advance_and_settle(heartbeat.interval_seconds)
        assert redis.hget(keys.process(process.identity), "beat") == last_beat
        assert len(reasons) == 1
    finally:
        heartbeat.stop()


def test_a_process_whose_in_flight_list_was_recovered_fences_itself_at_its_next_beat(redis):
    # Given a beating process
    clock = ManualClock()
    process, heartbeat, reasons = fenced_heartbeat(clock)
    try:
        # When another process's recovery takes its in-flight list
        recover_list(redis, process.identity)
        clock.advance_and_settle(heartbeat.interval_seconds)
        # Then its next beat notices, and it is fenced
        assert reasons == ["its in-flight list was recovered by another process"]
    finally:
        heartbeat.stop()


def test_a_redis_that_lost_its_data_is_no_reason_to_fence(redis):
    # Given a beating process
    clock = ManualClock()
    process, heartbeat, reasons = fenced_heartbeat(clock)
    try:
        # When Redis loses everything (a FLUSHDB, a restart without persistence): no one recovered
        # its list, which its running jobs still need to finish and be acknowledged
        redis.flushdb()
        clock.advance_and_settle(heartbeat.interval_seconds)
        # Then it is not fenced, and registers itself again
        assert reasons == []
        assert redis.sismember(keys.INFLIGHT_INDEX, process.identity)
    finally:
        heartbeat.stop()


def test_beats_that_fail_longer_than_the_ttl_are_no_reason_to_fence(redis):
    # Given a beating process whose Redis then stops answering for longer than the TTL
    clock = ManualClock()
    process, heartbeat, reasons = fenced_heartbeat(clock)
    try:
        heartbeat.client = unreachable_redis()
        for _ in range(int(heartbeat.ttl_seconds / heartbeat.interval_seconds) + 2):
            clock.advance_and_settle(heartbeat.interval_seconds)
        # When Redis answers again (no one recovered its list: every process waited alike)
        heartbeat.client = get_redis()
        clock.advance_and_settle(heartbeat.interval_seconds)
        # Then it is not fenced, and beats again
        assert reasons == []
        assert float(redis.hget(keys.process(process.identity), "beat")) == clock.time()
    finally:
        heartbeat.stop()


class StallingRedis:
    """The test Redis, whose next PING stalls ``seconds`` on the manual clock (a frozen Redis, or
    this process stopped in the middle of a beat)."""

    def __init__(self, clock: ManualClock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self.client = get_redis()

    def ping(self) -> bool:
        self.clock.advance(self.seconds)
        self.seconds = 0.0
        return self.client.ping()

    def __getattr__(self, name: str):
        return getattr(self.client, name)


def test_a_beat_that_stalled_past_the_ttl_is_followed_by_another_at_once_and_is_no_gap(redis):
    # Given a beating process
    clock = ManualClock()
    _process, heartbeat, reasons = fenced_heartbeat(clock)
    try:
        # When its next beat stalls longer than the TTL inside Redis
        heartbeat.client = StallingRedis(clock, heartbeat.ttl_seconds + 5)
        before = len(clock.waits)
        clock.advance(heartbeat.interval_seconds)
        clock.settle(before + 2)
        # Then it beats again at once (to see whether its list was taken meanwhile), and is not fenced
        assert clock.waits[before : before + 2] == [0.0, heartbeat.interval_seconds]
        assert reasons == []
    finally:
        heartbeat.stop()
