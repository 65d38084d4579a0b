"""Job timeouts: ``sidekiq_options(timeout=seconds)`` validated where it is declared and pushed."""

from __future__ import annotations

import pytest

from jobsapp import Job, JobTimeout, client, sidekiq_options
from jobsapp.timeouts import timeout_seconds


@pytest.mark.parametrize("bad", [0, -1, "30", True, float("inf"), float("nan"), [5]])
def test_a_bad_timeout_is_refused_where_the_class_is_declared(bad):
    # Given / When a class declares a timeout that is not a positive number of seconds
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):

        @sidekiq_options(timeout=bad)
        class BadTimeout(Job):
            abstract = True

            def perform(self) -> None: ...


@pytest.mark.parametrize("bad", [0, -5, "soon"])
def test_a_bad_timeout_is_refused_at_push_and_nothing_is_written(redis, bad):
    # Given a raw item with a bad timeout
    item = {"class": "HardWorker", "args": [], "timeout": bad}
    # When it is pushed, Then it is refused with the option named, and no queue has it
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        client.push(item)
    assert redis.llen("queue:default") == 0


def test_timeout_seconds_reads_the_payload():
    # Given payloads with and without a timeout, Then the helper answers seconds or None
    assert timeout_seconds({"class": "X"}) is None
    assert timeout_seconds({"class": "X", "timeout": None}) is None
    assert timeout_seconds({"class": "X", "timeout": 2}) == 2.0
    # And JobTimeout built without arguments (as an asynchronous exception is) has a message
    assert str(JobTimeout()) == "the job ran past its timeout"
