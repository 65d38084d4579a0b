"""The transactional outbox (issue 31), in one process on a real Redis and the test database: a
push inside the project's transaction is written with it, pushed at its commit and marked pushed,
and the relay's next round deletes the entry without pushing it again; a rollback leaves nothing;
Redis down at commit leaves the entry for the relay (and raises nothing out of the block); a push
that cannot succeed is parked with its reason."""

from __future__ import annotations

import json

import pytest
from django.core import checks
from django.db import connection, transaction

from jobsapp import client, middleware, outbox, scripts
from jobsapp import connection as jobs_connection
from jobsapp.checks import check_outbox_table
from jobsapp.models import OutboxEntry
from jobsapp.worker.relay import OutboxRelay
from tests.testapp.jobs import Record

pytestmark = pytest.mark.django_db(transaction=True)

DEAD_REDIS = "redis://127.0.0.1:1/0"


@pytest.fixture(autouse=True)
def _outbox_on(settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "OUTBOX": True}
    outbox.forget_tables()
    yield
    outbox.forget_tables()


def queued(redis) -> list[dict]:
    return [json.loads(raw) for raw in reversed(redis.lrange("queue:default", 0, -1))]


def redis_down(settings) -> str:
    """Point the engine at a port nothing listens on; returns the URL to restore."""
    working = settings.JOBSAPP["REDIS_URL"]
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": DEAD_REDIS}
    jobs_connection.reset()
    return working


def redis_back(settings, url: str) -> None:
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": url}
    jobs_connection.reset()


def test_inside_a_transaction_the_entry_is_written_then_pushed_at_commit_and_cleaned_by_the_relay(redis):
    # Given jobs pushed every way inside a transaction
    with transaction.atomic():
        single = Record.perform_async("one")
        later = Record.perform_in(60, "later")
        bulk = Record.perform_bulk([["b1"], ["b2"]])
        # Then before the commit each push is an outbox entry in the transaction, and Redis is empty
        assert sorted(OutboxEntry.objects.values_list("jid", flat=True)) == sorted([single, later, bulk[0]])
        assert redis.llen("queue:default") == 0
    # When it commits, Then every job is in Redis under its jid, each entry marked pushed
    assert [item["jid"] for item in queued(redis)] == [single, *bulk]
    assert {json.loads(raw)["jid"] for raw in redis.zrange("schedule", 0, -1)} == {later}
    assert {jid.decode() for jid in redis.zrange("jobsapp:outbox:pushed", 0, -1)} == {single, later, bulk[0]}
    # When the relay runs, even with no grace, Then it deletes the entries and their marks, pushing nothing again
    done = outbox.relay_due(grace_seconds=0)
    assert (done.cleaned, done.pushed) == (3, 0)
    assert OutboxEntry.objects.count() == 0 and redis.zcard("jobsapp:outbox:pushed") == 0
    assert redis.llen("queue:default") == 3


def test_a_rollback_leaves_no_entry_and_pushes_nothing(redis):
    with pytest.raises(RuntimeError), transaction.atomic():
        Record.perform_async("never")
        raise RuntimeError("the view failed")
    assert OutboxEntry.objects.count() == 0
    assert redis.llen("queue:default") == 0


def test_a_rolled_back_savepoint_takes_its_entry_and_its_push_with_it(redis):
    with transaction.atomic():
        kept = Record.perform_async("kept")
        with pytest.raises(RuntimeError), transaction.atomic():
            Record.perform_async("undone")
            raise RuntimeError("inner block failed")
    assert [item["jid"] for item in queued(redis)] == [kept]
    assert list(OutboxEntry.objects.values_list("jid", flat=True)) == [kept]


def test_outside_a_transaction_nothing_is_written(redis):
    jid = Record.perform_async("at once")
    assert [item["jid"] for item in queued(redis)] == [jid]
    assert OutboxEntry.objects.count() == 0


def test_redis_down_at_commit_raises_nothing_and_the_relay_pushes_the_entry_later(redis, settings):
    # Given Redis down when the transaction commits
    working = redis_down(settings)
    with transaction.atomic():
        jid = Record.perform_async("kept safe")
    # Then the block ended normally and the job waits in the outbox
    assert list(OutboxEntry.objects.values_list("jid", flat=True)) == [jid]
    # When Redis is back and the relay runs (no grace)
    redis_back(settings, working)
    done = outbox.relay_due(grace_seconds=0)
    # Then the job is in Redis under its jid, once, and the outbox is empty
    assert (done.cleaned, done.pushed, done.parked) == (0, 1, 0)
    assert [item["jid"] for item in queued(redis)] == [jid]
    assert OutboxEntry.objects.count() == 0


def test_the_relay_leaves_entries_younger_than_the_grace(redis, settings):
    working = redis_down(settings)
    with transaction.atomic():
        Record.perform_async("young")
    redis_back(settings, working)
    assert outbox.relay_due(grace_seconds=60).pushed == 0
    assert OutboxEntry.objects.count() == 1


class RefuseMarked(middleware.ClientMiddleware):
    def call(self, job_class, item, queue, redis):
        if item["args"] == ["refused"]:
            raise ValueError("this payload is refused")
        return item


def test_a_push_that_cannot_succeed_is_parked_with_its_reason_and_never_retried(redis, settings):
    # Given a client middleware that refuses one payload (as Redis refusing it would)
    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": [f"{__name__}.RefuseMarked"]}
    middleware.reset_chains()
    # When it is pushed inside a transaction that commits
    with transaction.atomic():
        refused = Record.perform_async("refused")
        accepted = Record.perform_async("accepted")
    # Then the commit stands, the other job is pushed, and the refused one is parked with its reason
    assert [item["jid"] for item in queued(redis)] == [accepted]
    outbox.relay_due(grace_seconds=60)  # the pushed entry cleaned
    entry = OutboxEntry.objects.get()
    assert entry.jid == refused and entry.parked_at is not None
    assert "ValueError: this payload is refused" in entry.reason
    # And the relay never tries it again; operators see it
    assert outbox.relay_due(grace_seconds=0) == outbox.RelayRound(cleaned=0, pushed=0, parked=0, full=False)
    state = outbox.state()
    assert state is not None and (state.depth, state.parked) == (0, 1)
    assert [parked.jid for parked in outbox.parked()] == [refused]


def test_a_payload_too_large_is_refused_in_the_caller_and_rolls_back(redis, settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "MAX_PAYLOAD_BYTES": 100}
    with pytest.raises(ValueError, match="MAX_PAYLOAD_BYTES"), transaction.atomic():
        Record.perform_async("x" * 200)
    assert OutboxEntry.objects.count() == 0


def test_the_state_counts_waiting_entries_and_dates_the_oldest(redis, settings):
    working = redis_down(settings)
    for index in range(3):
        with transaction.atomic():
            Record.perform_async(index)
    redis_back(settings, working)
    state = outbox.state()
    assert state is not None and state.depth == 3 and state.parked == 0
    assert state.oldest_created_at == OutboxEntry.objects.order_by("pk").first().created_at


def test_with_the_setting_off_no_entry_is_written(redis, settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "OUTBOX": False}
    with transaction.atomic():
        jid = Record.perform_async("plain on_commit")
    assert [item["jid"] for item in queued(redis)] == [jid]
    assert OutboxEntry.objects.count() == 0


def test_one_relay_holds_the_lock_until_it_stops(redis):
    # Given two relays
    first = OutboxRelay(client=jobs_connection.get_redis(), grace_seconds=0, lock_seconds=30)
    second = OutboxRelay(client=jobs_connection.get_redis(), grace_seconds=0, lock_seconds=30)
    # When both ask for the lock, Then only the first holds it, and keeps it when it asks again
    assert first.holds_lock() and not second.holds_lock() and first.holds_lock()
    assert 0 < redis.pttl("jobsapp:lock:outbox_relay") <= 30_000
    # When the first stops, Then the second takes the lock at once
    first.stop()
    assert second.holds_lock()
    assert not scripts.relay_unlock(jobs_connection.get_redis(), token=first.token)


def test_without_the_table_the_engine_runs_without_the_outbox_and_the_check_says_so(redis):
    # Given a database where the outbox table was never created (a project that did not migrate)
    with connection.schema_editor() as editor:
        editor.delete_model(OutboxEntry)
    try:
        outbox.forget_tables()
        # When a job is pushed inside a transaction, Then it is pushed at commit as without the outbox
        with transaction.atomic():
            jid = Record.perform_async("no table")
        assert [item["jid"] for item in queued(redis)] == [jid]
        # And the system check names what is missing, with a stable id
        messages = check_outbox_table(databases=["default"])
        assert [message.id for message in messages] == ["jobsapp.W050"]
        assert messages[0].level == checks.WARNING and "migrate jobsapp" in (messages[0].hint or "")
    finally:
        with connection.schema_editor() as editor:
            editor.create_model(OutboxEntry)
        outbox.forget_tables()
    assert check_outbox_table(databases=["default"]) == []


def test_a_raw_client_push_inside_a_transaction_is_still_immediate(redis):
    with transaction.atomic():
        jid = client.push({"class": "HardWorker", "args": [1]})
        assert [item["jid"] for item in queued(redis)] == [jid]
    assert OutboxEntry.objects.count() == 0


def parked_and_waiting(settings) -> tuple[str, str]:
    """One parked entry (its push refused) and one waiting entry (Redis down at its commit)."""
    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": [f"{__name__}.RefuseMarked"]}
    middleware.reset_chains()
    with transaction.atomic():
        parked = Record.perform_async("refused")
    working = redis_down(settings)
    with transaction.atomic():
        waiting = Record.perform_async("waiting")
    redis_back(settings, working)
    return parked, waiting


def test_operators_see_the_depth_the_oldest_entry_and_the_parked_ones(redis, settings, django_user_model):
    from io import StringIO

    from django.core.management import call_command
    from django.test import Client
    from django.urls import reverse
    from prometheus_client.parser import text_string_to_metric_families

    # Given an outbox with one entry waiting and one parked
    parked, waiting = parked_and_waiting(settings)
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True))
    # When the metrics are scraped, Then they export the depth, the oldest age and the parked count
    response = staff.get(reverse("jobsapp:metrics"))
    samples = {s.name: s.value for f in text_string_to_metric_families(response.content.decode()) for s in f.samples}
    assert samples["jobs_outbox_entries"] == 1 and samples["jobs_outbox_parked"] == 1
    assert 0 <= samples["jobs_outbox_oldest_age_seconds"] < 60
    # When the jobs command is asked, Then it says the same, with the parked entry's reason
    out = StringIO()
    call_command("jobs", "outbox", "--json", stdout=out)
    document = json.loads(out.getvalue())
    assert (document["entries"], document["parked"]) == (1, 1)
    assert [entry["jid"] for entry in document["parked_entries"]] == [parked]
    assert "this payload is refused" in document["parked_entries"][0]["reason"]
    # And the dashboard's overview shows the outbox and the parked entry's reason
    page = staff.get(reverse("jobsapp:overview")).content.decode()
    assert 'id="outbox"' in page and parked in page and "this payload is refused" in page
    assert waiting not in page  # a waiting entry is counted, not listed


def test_with_the_outbox_off_operators_see_no_outbox(redis, settings):
    from io import StringIO

    from django.core.management import call_command

    settings.JOBSAPP = {**settings.JOBSAPP, "OUTBOX": False}
    out = StringIO()
    call_command("jobs", "outbox", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"outbox": None}


def test_a_long_round_renews_the_lock_and_stops_once_another_relay_holds_it(redis):
    from tests.manual_clock import ManualClock

    # Given a relay in the middle of a round, holding the lock
    clock = ManualClock()
    relay = OutboxRelay(client=jobs_connection.get_redis(), grace_seconds=0, lock_seconds=30, clock=clock)
    assert relay.holds_lock()
    relay._renewed_at = clock.monotonic()
    # When less than a third of the TTL has passed, Then it goes on without asking Redis
    redis.delete("jobsapp:lock:outbox_relay")
    assert relay.keep_going()
    # When its lock expired meanwhile and another relay took it, and a third of the TTL passed
    other = OutboxRelay(client=jobs_connection.get_redis(), grace_seconds=0, lock_seconds=30, clock=clock)
    assert other.holds_lock()
    clock.advance(11)
    # Then it stops pushing, and the other keeps the lock
    assert not relay.keep_going()
    assert redis.get("jobsapp:lock:outbox_relay") == other.token.encode()
    # And a relay that still holds its lock renews it on the way
    other._renewed_at = clock.monotonic() - 11
    redis.pexpire("jobsapp:lock:outbox_relay", 1000)
    assert other.keep_going() and redis.pttl("jobsapp:lock:outbox_relay") > 20_000


def test_celery_delay_on_commit_goes_through_the_outbox_and_delay_still_pushes_at_once(redis, settings):
    from tests.testapp.tasks import celery_add

    working = redis_down(settings)
    # Given Redis down, When delay_on_commit is called in a transaction that commits
    with transaction.atomic():
        celery_add.delay_on_commit(1, 2)
    # Then the commit raised nothing and the task waits in the outbox
    assert OutboxEntry.objects.count() == 1
    redis_back(settings, working)
    # When the relay runs, Then the task is pushed
    assert outbox.relay_due(grace_seconds=0).pushed == 1
    assert [item["args"] for item in queued(redis)] == [[1, 2]]
    # And delay inside a transaction pushes at once, as Celery's, with no entry
    with transaction.atomic():
        celery_add.delay(3, 4)
        assert [item["args"] for item in queued(redis)] == [[1, 2], [3, 4]]
    assert OutboxEntry.objects.count() == 0


def test_in_the_fake_test_mode_the_outbox_is_bypassed(redis, jobs_fake):
    with transaction.atomic():
        Record.perform_async("faked")
    assert OutboxEntry.objects.count() == 0


def test_a_django_task_backend_asked_to_wait_for_the_commit_goes_through_the_outbox(redis, settings):
    pytest.importorskip("django.tasks", reason="django.tasks needs Django 6.0+")
    from tests.testapp.tasks import add_numbers

    # Given the backend's ENQUEUE_ON_COMMIT option
    settings.TASKS = {"default": {"BACKEND": "jobsapp.django_tasks.JobsBackend", "OPTIONS": {"ENQUEUE_ON_COMMIT": True}}}
    # When a task is enqueued in a transaction, Then it waits for the commit, as an outbox entry
    with transaction.atomic():
        add_numbers.enqueue(1, 2)
        assert redis.llen("queue:default") == 0
        assert OutboxEntry.objects.count() == 1
    assert redis.llen("queue:default") == 1


def test_an_operator_gives_a_parked_entry_back_to_the_relay_or_discards_it(redis, settings):
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    # Given two parked entries (a client middleware refused them)
    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": [f"{__name__}.RefuseMarked"]}
    middleware.reset_chains()
    with transaction.atomic():
        kept = Record.perform_async("refused")
    with transaction.atomic():
        Record.perform_async("refused")
    first, second = OutboxEntry.objects.order_by("pk").values_list("pk", flat=True)
    # When the cause is fixed and the operator retries the first, Then the relay pushes it
    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": []}
    middleware.reset_chains()
    call_command("jobs", "outbox", "retry", str(first), stdout=StringIO())
    assert outbox.relay_due(grace_seconds=0).pushed == 1
    assert [item["jid"] for item in queued(redis)] == [kept]
    # And discarding the second needs --yes, then deletes it for good
    with pytest.raises(CommandError, match="--yes"):
        call_command("jobs", "outbox", "discard", str(second), stdout=StringIO())
    call_command("jobs", "outbox", "discard", str(second), "--yes", stdout=StringIO())
    assert OutboxEntry.objects.count() == 0
    # And an id that is not a parked entry is a clear error
    with pytest.raises(CommandError, match="no parked outbox entry"):
        call_command("jobs", "outbox", "retry", str(second), stdout=StringIO())
