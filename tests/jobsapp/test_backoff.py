"""One outage, one warning: the Backoff's delays and log lines, and a polling component through
a real outage (a client on a port where nothing listens), on a manual clock."""

from __future__ import annotations

import logging
import random
import threading

import pytest
import redis as redis_lib

from jobsapp.backoff import Backoff, call_with_retry
from jobsapp.connection import get_redis
from jobsapp.worker.scheduler import Scheduler
from tests.manual_clock import ManualClock
from tests.redis_down import unreachable_redis

logger = logging.getLogger("tests.backoff")


def test_delays_double_from_a_tenth_of_a_second_up_to_five_with_jitter():
    # Given a backoff
    backoff = Backoff("loop", logger=logger, rng=random.Random(3))
    # When eight attempts fail in a row
    delays = [backoff.failed(redis_lib.ConnectionError("down")) for _ in range(8)]
    # Then each delay is 0.1 s doubled per failure, capped at 5 s, within +-20 %
    for delay, nominal in zip(delays, [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0], strict=True):
        assert nominal * 0.8 <= delay <= nominal * 1.2


def test_an_outage_is_one_warning_and_its_end_one_info_with_the_count(caplog):
    caplog.set_level(logging.INFO, logger="tests.backoff")
    backoff = Backoff("fetch", logger=logger)
    # When three attempts fail and the fourth works, twice over
    for _ in range(2):
        for _ in range(3):
            backoff.failed(redis_lib.ConnectionError("Connection refused"))
        backoff.succeeded()
    backoff.succeeded()  # no outage: nothing to say
    # Then each outage logged one warning with the error and one line when it ended
    assert [(record.levelname, record.getMessage()) for record in caplog.records] == [
        ("WARNING", "fetch: Redis unavailable (Connection refused); retrying with backoff"),
        ("INFO", "fetch: Redis is back after 3 failed attempts"),
    ] * 2


def test_an_unexpected_error_is_logged_with_its_traceback_once(caplog):
    caplog.set_level(logging.INFO, logger="tests.backoff")
    backoff = Backoff("scheduler", logger=logger)
    for _ in range(3):
        try:
            raise KeyError("bug")
        except KeyError as exc:
            backoff.failed(exc, unexpected=True)
    (record,) = caplog.records
    assert record.levelname == "ERROR" and record.exc_info is not None and "unexpected error" in record.getMessage()


def test_call_with_retry_waits_out_an_outage_on_the_clock_and_returns_the_answer():
    # Given an operation that fails twice (Redis does not answer) and then answers
    clock = ManualClock(auto_advance=True)
    clients = [unreachable_redis(), unreachable_redis(), get_redis()]
    backoff = Backoff("ping", logger=logger, clock=clock)
    # When it is called with retry, Then it returns the answer after two backoff waits
    assert call_with_retry(lambda: clients.pop(0).ping(), what="ping", logger=logger, backoff=backoff) is True
    assert len(clock.waits) == 2 and backoff.failures == 0


def test_call_with_retry_gives_up_with_the_error_once_stopped():
    stop = threading.Event()
    stop.set()
    with pytest.raises(redis_lib.ConnectionError):
        call_with_retry(unreachable_redis().ping, what="ping", logger=logger, stop=stop)


def test_the_scheduler_backs_off_through_an_outage_and_polls_normally_after_it(redis, caplog):
    # Given a scheduler whose Redis does not answer, on a manual clock
    caplog.set_level(logging.INFO, logger="jobsapp.scheduler")
    clock = ManualClock()
    scheduler = Scheduler(client=unreachable_redis(), poll_interval_seconds=1.0, rng=random.Random(5), clock=clock)
    scheduler.start()
    try:
        # When its first three polls fail (the first one at once)
        clock.settle(2)
        for _ in range(2):
            clock.advance_and_settle(clock.waits[-1])
        # Then it waited 0.1, 0.2, 0.4 s (with jitter) and warned once
        assert clock.waits[0] == 0.0
        for delay, nominal in zip(clock.waits[1:], [0.1, 0.2, 0.4], strict=True):
            assert nominal * 0.8 <= delay <= nominal * 1.2
        assert [record.levelname for record in caplog.records] == ["WARNING"]
        # When Redis answers again
        scheduler.client = get_redis()
        clock.advance_and_settle(clock.waits[-1])
        # Then it says so once, and waits its poll interval (jittered +-25 %) again
        assert caplog.records[-1].getMessage() == "scheduler: Redis is back after 3 failed attempts"
        assert 0.75 <= clock.waits[-1] <= 1.25
    finally:
        scheduler.stop()
