"""Scenario 7: oversized and non-JSON arguments are refused at enqueue, and nothing is written.

Given a producer passing values JSON cannot carry faithfully (or too much data), When it enqueues
them now, later, in bulk or as a raw item, Then it gets a clear TypeError / ValueError /
PayloadTooLarge naming the offending value, and Redis is left exactly as it was (no key, no
partial bulk).
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest

from jobsapp import PayloadTooLarge, client
from jobsapp.payload import MAX_NESTING
from tests.faults.jobs import LedgerJob


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


NOT_JSON = [
    (dt.datetime(2026, 1, 1), r"args\[1\] is a datetime\.datetime"),
    (dt.date(2026, 1, 1), r"args\[1\] is a datetime\.date"),
    (decimal.Decimal("1.5"), r"args\[1\] is a decimal\.Decimal"),
    (uuid.UUID(int=1), r"args\[1\] is an? uuid\.UUID"),
    ({1, 2}, r"args\[1\] is a set"),
    ((1, 2), r"args\[1\] is a tuple"),
    (b"bytes", r"args\[1\] is a bytes"),
    (object(), r"args\[1\] is an object"),
    (float("nan"), r"args\[1\] is nan, which is not valid JSON"),
    (float("inf"), r"args\[1\] is inf"),
    ({1: "int key"}, r"args\[1\] has a key 1 of type int"),
    ({"deep": [{"when": dt.time(1)}]}, r'args\[1\]\["deep"\]\[0\]\["when"\] is a datetime\.time'),
]


def assert_nothing_written(redis) -> None:
    assert redis.dbsize() == 0, sorted(redis.keys())


@pytest.mark.parametrize(("value", "message"), NOT_JSON, ids=[type(value).__name__ for value, _ in NOT_JSON])
def test_non_json_arguments_are_refused_everywhere(redis, value, message):
    with pytest.raises(TypeError, match=message):
        LedgerJob.perform_async("s7", value)
    with pytest.raises(TypeError, match=message):
        LedgerJob.perform_in(60, "s7", value)
    with pytest.raises(TypeError, match=message):
        client.push({"class": "HardWorker", "args": ["s7", value]})
    with pytest.raises(TypeError, match="job 2 of the bulk push: " + message):
        LedgerJob.perform_bulk([["s7-0"], ["s7-1"], ["s7-2", value], ["s7-3"]])
    assert_nothing_written(redis)


def test_non_json_keyword_arguments_and_options_are_refused(redis):
    with pytest.raises(TypeError, match=r'kwargs\["when"\] is a datetime'):
        LedgerJob.perform_async("s7", when=dt.datetime(2026, 1, 1))
    with pytest.raises(TypeError, match="tags is a set"):
        LedgerJob.set(tags={"a"}).perform_async("s7")
    with pytest.raises(TypeError, match='"args" must be a list'):
        client.push({"class": "HardWorker", "args": ("tuple",)})
    with pytest.raises(ValueError, match='needs "class"'):
        client.push({"args": []})
    assert_nothing_written(redis)


def test_arguments_nested_too_deep_are_refused_not_a_recursion_error(redis):
    LedgerJob.perform_async("s7-ok", nested(MAX_NESTING - 2))
    redis.flushall()
    for depth in (MAX_NESTING + 1, 100_000):
        with pytest.raises(ValueError, match=f"deeper than {MAX_NESTING} levels"):
            LedgerJob.perform_async("s7", nested(depth))
        with pytest.raises(ValueError, match=f"deeper than {MAX_NESTING} levels"):
            LedgerJob.perform_bulk([["s7-0"], ["s7-1", nested(depth)]])
    assert_nothing_written(redis)


def test_oversized_payloads_are_refused_before_any_write(redis, settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "MAX_PAYLOAD_BYTES": 64 * 1024}
    big = "x" * (64 * 1024)
    with pytest.raises(PayloadTooLarge, match="over the 65536-byte limit"):
        LedgerJob.perform_async("s7", big)
    with pytest.raises(PayloadTooLarge):
        LedgerJob.perform_at(dt.datetime(2030, 1, 1), "s7", big)
    # a bulk push whose last job is too big writes none of the earlier ones (several batches)
    with pytest.raises(PayloadTooLarge):
        LedgerJob.perform_bulk([[f"s7-{index}"] for index in range(2500)] + [["s7-big", big]], batch_size=1000)
    assert_nothing_written(redis)


def test_default_limit_is_one_mebibyte(redis):
    with pytest.raises(PayloadTooLarge, match="1048576-byte limit"):
        LedgerJob.perform_async("s7", "y" * (1024 * 1024))
    assert_nothing_written(redis)
    LedgerJob.perform_async("s7", "y" * (1024 * 1024 - 200))
    assert redis.llen("queue:default") == 1
