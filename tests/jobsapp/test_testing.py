"""jobsapp.testing: fake and inline modes for users' tests."""

from __future__ import annotations

import pytest

from jobsapp import middleware, testing
from jobsapp.middleware import ServerMiddleware
from tests.testapp.jobs import Explode, ImportRow, Noop


@pytest.fixture(autouse=True)
def _clean():
    yield
    testing.set_mode("disabled")
    testing.clear_all()


def test_fake_mode_collects_without_touching_redis(redis):
    with testing.fake_mode():
        jid = ImportRow.perform_async(7, dry_run=True)
        Noop.perform_in(60, "later")
        assert [item["jid"] for item in testing.jobs(ImportRow)] == [jid]
        assert "at" in testing.jobs(Noop)[0]
        assert testing.drain(ImportRow) == 1
        assert testing.jobs(ImportRow) == []
        assert testing.drain_all() == 1
    assert redis.dbsize() == 0


seen: list[tuple[str, list]] = []


class Spy(ServerMiddleware):
    def call(self, job, item, queue, call_next):
        seen.append((type(job).__name__, item["args"]))
        return call_next()


def test_inline_mode_runs_through_server_middleware_and_raises(redis):
    middleware.server_chain().add(Spy)
    seen.clear()
    with testing.inline_mode():
        ImportRow.perform_async(3)
        assert seen == [("ImportRow", [3])]
        with pytest.raises(ValueError, match="kaboom"):
            Explode.perform_async("kaboom")
    assert redis.dbsize() == 0
    assert testing.mode() == "disabled"


# --- the pytest fixtures (jobsapp.pytest_plugin) ---------------------------------------


def test_jobs_fake_collects_and_starts_empty(jobs_fake, redis):
    # Given a test that uses the fixture, When it enqueues, Then jobs are collected, not pushed
    assert jobs_fake.mode() == "fake" and jobs_fake.jobs() == []
    jid = ImportRow.perform_async(1)
    assert [item["jid"] for item in jobs_fake.jobs(ImportRow)] == [jid]
    assert redis.dbsize() == 0
    testing._queued["leftover"].append({"class": "leftover"})  # as if a test forgot to drain


def test_jobs_fake_is_emptied_between_tests(jobs_fake):
    # (runs after the test above: nothing it collected is seen here)
    assert jobs_fake.jobs() == []


def test_jobs_inline_runs_at_once_and_the_mode_ends_with_the_test(jobs_inline):
    with pytest.raises(ValueError, match="boom"):
        Explode.perform_async("boom")
    assert jobs_inline.mode() == "inline"


def test_after_a_fixture_the_mode_is_back_to_real():
    assert testing.mode() == "disabled"


@pytest.mark.parametrize("until", ["success", "start"])
def test_fake_mode_honours_unique_for_until_the_collected_job_runs(redis, until):
    from tests.testapp.jobs import UniqueRecord, UniqueUntilStart

    job_class = UniqueRecord if until == "success" else UniqueUntilStart
    with testing.fake_mode():
        # Given a unique job collected in fake mode
        first = job_class.perform_async("a")
        # When the same job is pushed again (alone and in a bulk push), and a different one
        again = job_class.perform_async("a")
        bulk = job_class.perform_bulk([["a"], ["b"]])
        # Then the copies are refused as Redis would refuse them, the other is collected
        assert first is not None and again is None
        assert bulk[0] is None and bulk[1] is not None
        assert [item["args"] for item in testing.jobs(job_class)] == [["a"], ["b"]]
        # and once the collected job has run, the same job may be pushed again
        testing.drain(job_class)
        assert job_class.perform_async("a") is not None
        # and clearing the collected jobs releases their locks
        testing.clear(job_class)
        assert job_class.perform_async("a") is not None
    assert not redis.keys("jobsapp:unique:*")  # no lock was written to Redis
