"""RetryPolicy: the fate of a failed job, decided and filed atomically, in-process."""

from __future__ import annotations

import json
import random

import pytest

from jobsapp import client, ending, keys, middleware
from jobsapp.connection import get_redis
from jobsapp.error_fields import BACKTRACE_LINE_MAX_CHARS, DEFAULT_BACKTRACE_FRAMES, compress_backtrace, decompress_backtrace
from jobsapp.middleware import ServerMiddleware
from jobsapp.payload import decode
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.retry import RetryPolicy, default_delay_seconds
from tests.testapp.jobs import Explode

INFLIGHT = keys.inflight("test:1:000000000000")
handled: list[tuple] = []


def error_handler(exception, context):
    handled.append(("error", type(exception).__name__, context["job"]["jid"]))


def death_handler(item, exception):
    handled.append(("death", item["jid"], str(exception)))


class Hooks(ServerMiddleware):
    def on_retry(self, job_class, item, exception, *, retry_count, retry_limit, run_at):
        handled.append(("on_retry", retry_count, retry_limit))

    def on_dead(self, job_class, item, exception, *, reason):
        handled.append(("on_dead", reason))


class Exhausted(Explode):
    exhausted: list = []

    @classmethod
    def sidekiq_retries_exhausted(cls, item, exception):
        cls.exhausted.append(item["jid"])


@pytest.fixture
def in_flight(redis, settings):
    """Push an item and move it into an in-flight list, as the fetcher would."""
    settings.JOBSAPP = {
        **settings.JOBSAPP,
        "ERROR_HANDLERS": ["tests.jobsapp.test_retry.error_handler"],
        "DEATH_HANDLERS": ["tests.jobsapp.test_retry.death_handler"],
    }
    middleware.server_chain().add(Hooks)
    handled.clear()

    def make(item):
        client.push(item)
        raw = redis.lmove(f"queue:{item.get('queue', 'default')}", INFLIGHT, "RIGHT", "LEFT")
        return UnitOfWork(raw, item.get("queue", "default")), decode(raw)

    return make


def test_first_failure_schedules_a_retry_and_acks(redis, in_flight):
    unit, item = in_flight({"class": Explode.wire_name(), "args": ["x"], "retry": 3, "retry_queue": "slow", "backtrace": 5})
    try:
        raise ValueError("bad row")
    except ValueError as exc:
        outcome = RetryPolicy(get_redis(), INFLIGHT, rng=random.Random(1)).handle(unit, item, Explode, exc)
        ending.finish_outcome(get_redis(), item, outcome, error=exc, job_class=Explode)  # as the processor does
    assert outcome.kind == "retry"
    assert redis.llen(INFLIGHT) == 0
    retried = json.loads(redis.zrange("retry", 0, -1)[0])
    assert retried["queue"] == "slow" and retried["retry_count"] == 0 and retried["error_message"] == "bad row"
    assert len(decompress_backtrace(retried["error_backtrace"])) <= 5
    assert handled == [("error", "ValueError", item["jid"]), ("on_retry", 0, 3)]


def test_exhausted_retries_call_the_hook_then_dead_and_death_handlers(redis, in_flight):
    unit, item = in_flight({"class": Exhausted.wire_name(), "args": [], "retry": 1, "retry_count": 0})
    error = RuntimeError("still bad")
    outcome = RetryPolicy(get_redis(), INFLIGHT).handle(unit, item, Exhausted, error)
    ending.finish_outcome(get_redis(), item, outcome, error=error, job_class=Exhausted)  # as the processor does
    assert outcome.kind == "dead" and outcome.reason == "retries_exhausted"
    assert Exhausted.exhausted == [item["jid"]]
    dead = json.loads(redis.zrange("dead", 0, -1)[0])
    assert dead["retry_count"] == 1 and "retried_at" in dead
    assert handled[-2:] == [("death", item["jid"], "still bad"), ("on_dead", "retries_exhausted")]


def test_dead_false_drops_instead_of_burying(redis, in_flight):
    unit, item = in_flight({"class": Explode.wire_name(), "args": [], "retry": 0, "dead": False})
    outcome = RetryPolicy(get_redis(), INFLIGHT).handle(unit, item, Explode, RuntimeError("x"))
    assert outcome.kind == "discarded" and redis.zcard("dead") == 0


def test_a_job_taken_back_by_a_sweeper_is_not_filed_twice(redis, in_flight):
    unit, item = in_flight({"class": Explode.wire_name(), "args": []})
    redis.delete(INFLIGHT)  # a sweeper recovered it: it will run again
    outcome = RetryPolicy(get_redis(), INFLIGHT).handle(unit, item, Explode, RuntimeError("x"))
    assert outcome.kind == "lost" and redis.zcard("retry") == 0


def test_dead_set_is_trimmed_to_its_maximum(redis, in_flight, settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "DEAD_MAX_JOBS": 5}
    for _ in range(8):
        unit, item = in_flight({"class": Explode.wire_name(), "args": [], "retry": 0})
        RetryPolicy(get_redis(), INFLIGHT).handle(unit, item, Explode, RuntimeError("x"))
    assert redis.zcard("dead") == 5


def test_backoff_formula_and_backtrace_encoding_match_sidekiq():
    rng = random.Random(3)
    for count in range(6):
        delay = default_delay_seconds(count, rng)
        assert count**4 + 15 <= delay <= count**4 + 15 + 9 * (count + 1)
    encoded = compress_backtrace(["a.py:1:in `x'"] * 50)
    assert "\n" in encoded  # Ruby's Base64.encode64 breaks lines every 60 characters
    assert decompress_backtrace(encoded) == ["a.py:1:in `x'"] * 50
    assert decompress_backtrace(["plain", "list"]) == ["plain", "list"]
    assert decompress_backtrace("not base64 zlib") == []


# django_db: Processor.process closes stale database connections around a job, which touches a
# connection an earlier test of the session left open (refused without the mark, depending on order)
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("job", "error_class"),
    [
        ("tests.testapp.jobs.NeedsArgumentsToBuild", "TypeError"),
        ("tests.testapp.jobs.RaisesUnprintable", "tests.testapp.jobs.UnprintableError"),
        ("tests.testapp.jobs.RaisesKeyboardInterrupt", "KeyboardInterrupt"),
    ],
)
def test_failures_outside_perform_or_with_broken_messages_are_filed_like_any_failure(redis, in_flight, job, error_class):
    # Given a job that fails while being built, or raises something unusual
    from jobsapp.worker.processor import Processor

    unit, _ = in_flight({"class": job, "args": []})
    # When a processor runs it, Then it is filed in the retry set (no requeue loop, no dead thread)
    result = Processor(RetryPolicy(get_redis(), INFLIGHT)).process(unit)
    assert result.failed and not result.acknowledge
    retried = json.loads(redis.zrange("retry", 0, -1)[0])
    assert retried["error_class"] == error_class and retried["error_message"]
    assert redis.llen(INFLIGHT) == 0


def fail_deep(depth: int, *, filename: str = __file__) -> BaseException:
    """An exception raised ``depth`` calls deep (in a module named ``filename``)."""
    namespace: dict = {}
    exec(compile("def dive(n):\n    if n == 0:\n        raise KeyError('row 42')\n    dive(n - 1)\n", filename, "exec"), namespace)
    try:
        namespace["dive"](depth)
    except KeyError as exc:
        return exc
    raise AssertionError("dive did not raise")


def filed_backtrace(redis, in_flight, exception, **options) -> list[str] | None:
    unit, item = in_flight({"class": Explode.wire_name(), "args": [], **options})
    RetryPolicy(get_redis(), INFLIGHT, rng=random.Random(1)).handle(unit, item, Explode, exception)
    (member,) = redis.zrange("retry", 0, -1)
    redis.delete("retry")
    encoded = json.loads(member).get("error_backtrace")
    return None if encoded is None else decompress_backtrace(encoded)


def test_a_python_job_without_the_option_gets_a_compact_backtrace(redis, in_flight):
    # Given a job pushed without a backtrace option, failing 60 calls deep in a long-named module
    long_name = "/srv/" + "deep/" * 80 + "rows.py"
    exception = fail_deep(60, filename=long_name)
    # When it is filed for a retry
    lines = filed_backtrace(redis, in_flight, exception)
    # Then it carries Sidekiq's encoding of its innermost 20 frames, innermost first, each line
    # bounded and keeping its end (file, line, function)
    assert lines is not None and len(lines) == DEFAULT_BACKTRACE_FRAMES
    assert lines[0].endswith("rows.py:3:in `dive'") and lines[0].startswith("…")
    assert all(len(line) <= BACKTRACE_LINE_MAX_CHARS for line in lines)


def test_the_backtrace_option_keeps_sidekiqs_meaning(redis, in_flight):
    exception = fail_deep(60)
    # false: none; true: every frame, whole lines; N: the innermost N
    assert filed_backtrace(redis, in_flight, exception, backtrace=False) is None
    every = filed_backtrace(redis, in_flight, exception, backtrace=True)
    assert every is not None and len(every) == 61 + 1  # dive x 61 and this module's fail_deep
    assert filed_backtrace(redis, in_flight, exception, backtrace=3) == every[:3]
    assert filed_backtrace(redis, in_flight, exception, backtrace=0) is None


def test_an_error_never_raised_gets_no_default_backtrace(redis, in_flight):
    from jobsapp.errors import UnknownJobClass

    # Given an unknown class's error, made by the worker, never raised (no frame of the job ran)
    lines = filed_backtrace(redis, in_flight, UnknownJobClass("'HardWorker' is not a registered job class"))
    # Then the job carries no backtrace, as Sidekiq would file it
    assert lines is None
