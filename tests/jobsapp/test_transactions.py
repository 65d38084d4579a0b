"""Enqueueing inside ``transaction.atomic()`` (issue 8): the push waits for the commit, so a job
never runs before its rows exist; a rollback pushes nothing; outside a transaction, as before."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from tests.testapp.jobs import Record

pytestmark = pytest.mark.django_db(transaction=True)


def queued(redis) -> list[dict]:
    return [json.loads(raw) for raw in reversed(redis.lrange("queue:default", 0, -1))]


def test_every_perform_waits_for_the_commit_and_keeps_its_jid(redis):
    # Given jobs enqueued in every way inside a transaction
    with transaction.atomic():
        single = Record.perform_async("now")
        later = Record.perform_in(60, "later")
        at = Record.perform_at(4_000_000_000, "at")
        bulk = Record.perform_bulk([["b1"], ["b2"]])
        optioned = Record.set(queue="default").perform_async("set")
        # Then nothing is in Redis before the commit, yet every call returned its jid
        assert redis.llen("queue:default") == 0 and redis.zcard("schedule") == 0
        assert all(isinstance(jid, str) and len(jid) == 24 for jid in [single, later, at, *bulk, optioned])
    # When it commits, Then each job is there under the jid the caller got
    assert [item["jid"] for item in queued(redis)] == [single, bulk[0], bulk[1], optioned]
    assert [item["args"] for item in queued(redis)] == [["now"], ["b1"], ["b2"], ["set"]]
    scheduled = {json.loads(raw)["jid"] for raw in redis.zrange("schedule", 0, -1)}
    assert scheduled == {later, at}
    assert all("on_commit" not in item for item in queued(redis))


def test_a_rollback_pushes_nothing(redis):
    with pytest.raises(RuntimeError), transaction.atomic():
        Record.perform_async("never")
        Record.perform_bulk([["never"]])
        raise RuntimeError("the view failed")
    assert redis.llen("queue:default") == 0


def test_outside_a_transaction_the_push_is_immediate(redis):
    jid = Record.perform_async("at once")
    assert [item["jid"] for item in queued(redis)] == [jid]


def test_on_commit_false_per_call_or_setting_pushes_at_once(redis, settings):
    with transaction.atomic():
        jid = Record.set(on_commit=False).perform_async("urgent")
        assert [item["jid"] for item in queued(redis)] == [jid]
        assert "on_commit" not in queued(redis)[0]
    settings.JOBSAPP = {**settings.JOBSAPP, "ENQUEUE_ON_COMMIT": False}
    with transaction.atomic():
        Record.perform_async("also at once")
        assert redis.llen("queue:default") == 2


def test_bad_arguments_raise_in_the_caller_not_at_commit(redis):
    with transaction.atomic():
        with pytest.raises(TypeError, match="set"):
            Record.perform_async({1, 2})
        with pytest.raises(TypeError, match="job 1 of the bulk push"):
            Record.perform_bulk([["fine"], [object()]])
    assert redis.llen("queue:default") == 0


def test_a_nested_block_waits_for_the_outermost_commit(redis):
    with transaction.atomic():
        with transaction.atomic():
            Record.perform_async("inner")
        assert redis.llen("queue:default") == 0
    assert redis.llen("queue:default") == 1


@pytest.mark.django_db
def test_the_block_a_test_case_wraps_each_test_in_does_not_defer(redis):
    # (pytest-django's django_db and Django's TestCase: their atomic block is not the project's)
    jid = Record.perform_async("in a test")
    assert [item["jid"] for item in queued(redis)] == [jid]
