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
