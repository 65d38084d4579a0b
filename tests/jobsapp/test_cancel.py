"""Cancelling jobs (``jobsapp.api.cancel``), in process against a real Redis: a running job is
interrupted by its processor and ends ``cancelled`` through the door (its unique lock released,
its batch counting it failed, its record saying cancelled, server middleware hearing it); a waiting
one is removed; an ended one is left alone and the answer says so; the request reaches a listener
through pub/sub, or through the remembered requests when it subscribes late; the ``jobs cancel``
command, the dashboard's Busy page and Celery's ``revoke(terminate=True)`` go through the same
call. Real worker processes: tests/faults/test_s21_cancel.py."""

from __future__ import annotations

import json
import math
import threading
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from jobsapp import Job, api, cancellation, client, keys, middleware, results
from jobsapp.api import CancelOutcome
from jobsapp.batch import Batch, BatchStatus
from jobsapp.celery import revoke
from jobsapp.connection import get_redis, new_redis
from jobsapp.errors import JobCancelled
from jobsapp.middleware import ServerMiddleware
from jobsapp.worker.cancel_listener import CancelListener
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from jobsapp.worker.timeouts import GuardState, LeaseExpired, Watchdog
from tests.workers import wait_until

pytestmark = pytest.mark.django_db  # a job run closes stale Django connections, as a worker does

IDENTITY = "test:1:0000000000cc"
INFLIGHT = keys.inflight(IDENTITY)
STARTED = "test:cancel:started"


def _loop_until(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


class Loops(Job):
    """Loops in Python code for ``seconds`` after noting that it started."""

    def perform(self, seconds):
        get_redis().rpush(STARTED, self.jid)
        _loop_until(seconds)
        return "finished"


HEARD: list[tuple[str, str, str]] = []


class Heard(ServerMiddleware):
    def on_retry(self, job_class, item, exception, *, retry_count, retry_limit, run_at):
        HEARD.append(("on_retry", item.get("jid"), ""))

    def on_dead(self, job_class, item, exception, *, reason):
        HEARD.append(("on_dead", item.get("jid"), reason))


@pytest.fixture
def heard():
    middleware.server_chain().add(Heard)
    HEARD.clear()
    yield HEARD
    middleware.server_chain().remove(Heard)


def _push(seconds: float, **options) -> tuple[str, Batch]:
    """A ``Loops`` job with a unique lock, a retained record and a batch."""
    batch = Batch(description="cancel")
    with batch.jobs():
        jid = client.push({"class": Loops.wire_name(), "args": [seconds], "queue": "default", "unique_for": 600, "retain": 600, **options})
    assert jid is not None
    return jid, batch


def _fetch(redis) -> UnitOfWork:
    raw = redis.lmove(keys.queue("default"), INFLIGHT, "RIGHT", "LEFT")
    assert raw is not None
    return UnitOfWork(raw, "default")


def _run_in_thread(processor: Processor, unit: UnitOfWork) -> tuple[threading.Thread, list]:
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(processor.process(unit)))
    thread.start()
    return thread, outcome


def test_a_running_job_is_interrupted_and_ends_cancelled_through_the_door(redis, heard):
    # Given a job with a unique lock, a record and a batch, running in a processor thread
    jid, batch = _push(60)
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT), watchdog=Watchdog())
    thread, outcome = _run_in_thread(processor, _fetch(redis))
    wait_until(lambda: get_redis().llen(STARTED) == 1, message="the job started")
    # When its cancel reaches the process
    assert processor.cancel(jid) is True
    thread.join(10)
    # Then the job stopped, is acknowledged and counted failed, never retried nor dead
    assert not thread.is_alive()
    (result,) = outcome
    assert (result.acknowledge, result.failed) == (True, True)
    assert redis.zcard(keys.RETRY) == 0 and redis.zcard(keys.DEAD) == 0
    # And its features heard it: the lock is free, the batch counts it failed, the record says cancelled
    assert client.push({"class": Loops.wire_name(), "args": [60], "queue": "default", "unique_for": 600}) is not None
    status = BatchStatus.read(batch.bid)
    assert status is not None and (status.pending, status.failed, status.complete) == (0, 1, True)
    record = results.get(jid)
    assert record is not None and (record.status, record.reason, record.error_class) == (
        results.FAILED,
        "cancelled",
        "jobsapp.errors.JobCancelled",
    )
    # And server middleware heard it once, with the reason cancelled
    assert [entry for entry in heard if entry[1] == jid] == [("on_dead", jid, "cancelled")]


def test_a_job_whose_cancel_came_before_it_started_does_not_run(redis, heard):
    # Given a processor that heard the cancel of a job it has not started (fetched, in a buffer)
    jid, _ = _push(60)
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT), watchdog=Watchdog())
    assert processor.cancel(jid) is False
    # When its thread takes the job
    result = processor.process(_fetch(redis))
    # Then perform was never called, and the job ended cancelled
    assert result is not None and result.failed
    assert get_redis().llen(STARTED) == 0
    assert [entry for entry in heard if entry[1] == jid] == [("on_dead", jid, "cancelled")]


def test_a_cancel_after_the_job_returned_changes_nothing(redis, heard):
    # Given a job that finished
    jid, _ = _push(0)
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT), watchdog=Watchdog())
    result = processor.process(_fetch(redis))
    assert result is not None and not result.failed
    # When its cancel arrives late
    assert processor.cancel(jid) is False
    # Then it stays succeeded, once
    record = results.get(jid)
    assert record is not None and record.status == results.SUCCEEDED
    assert [entry for entry in heard if entry[1] == jid] == []
    assert api.cancel(jid).outcome is CancelOutcome.ENDED


def test_the_watchdog_never_delivers_a_cancel_outside_the_guard():
    # Given a watchdog and a guarded call that returns at once
    watchdog = Watchdog()
    guarded = watchdog.within(math.inf, lambda: "value", jid="j1")
    # When the call has returned, a cancel for it finds nothing to interrupt
    assert guarded() == "value"
    assert watchdog.cancel("j1") is False
    # And a later guard for the same jid raises JobCancelled before calling anything
    called: list[str] = []
    with pytest.raises(JobCancelled):
        watchdog.within(math.inf, lambda: called.append("ran"), jid="j1")()
    assert called == []


def test_a_job_without_a_timeout_is_cancelled_without_a_guard_and_never_outside_its_perform():
    # Given a watchdog whose interrupts are recorded, and a job without a timeout noted by cancellable
    calls: list[tuple[int, object]] = []
    watchdog = Watchdog(interrupt=lambda thread_id, exception: calls.append((thread_id, exception)))
    seen: list[object] = []

    def perform() -> str:
        seen.append(watchdog.running())
        # When its cancel arrives while it runs (an interrupt recorded, not raised: as if it came
        # just as perform returned, before the exception was delivered)
        seen.append(watchdog.cancel("j1"))
        return "value"

    # Then its thread was found with no guard entered, the exception raised there once, and
    # cleared as the perform left: the job keeps its own outcome, nothing is left behind
    assert watchdog.cancellable(perform, jid="j1")() == "value"
    ident = threading.get_ident()
    assert seen == [{ident: (math.inf, GuardState.RUNNING)}, True]
    assert calls == [(ident, JobCancelled), (ident, None)]
    assert watchdog.running() == {} and watchdog._guards == {}
    # And a later perform of the same jid raises JobCancelled before calling anything
    called: list[str] = []
    with pytest.raises(JobCancelled):
        watchdog.cancellable(lambda: called.append("ran"), jid="j1")()
    assert called == []
    # And a job that is not cancelled pays no interrupt at all
    calls.clear()
    assert watchdog.cancellable(lambda: "other", jid="j2")() == "other" and calls == []


def test_a_cancel_never_interrupts_the_next_perform_of_a_thread_it_found_running_an_earlier_one():
    # Given a thread seen running jid j1, which has since started j2's perform
    calls: list[tuple[int, object]] = []
    watchdog = Watchdog(interrupt=lambda thread_id, exception: calls.append((thread_id, exception)))
    ident = threading.get_ident()
    seen_entry = ("j1", ident)
    next_entry = ("j2", ident)
    watchdog._performing[ident] = next_entry
    # When the cancel of j1 takes the entry it found, Then nothing is raised and j2's entry stays
    with watchdog._lock:
        assert watchdog._take_performing(ident, seen_entry, JobCancelled) is False
    assert calls == [] and watchdog._performing[ident] is next_entry


def test_a_lease_expiry_interrupts_a_job_without_a_timeout():
    # Given a job without a timeout running in another thread
    calls: list[tuple[int, object]] = []
    watchdog = Watchdog(interrupt=lambda thread_id, exception: calls.append((thread_id, exception)))
    started, release = threading.Event(), threading.Event()
    perform = watchdog.cancellable(lambda: started.set() or release.wait(10), jid="j1")
    performing = threading.Thread(target=perform)
    performing.start()
    started.wait(10)
    # When the process finds it was declared dead, Then LeaseExpired is raised in its thread, and
    # the process sees it running (interrupted) until its perform has left
    assert watchdog.expire_leases() == 1
    assert calls == [(performing.ident, LeaseExpired)]
    assert watchdog.running() == {performing.ident: (math.inf, GuardState.FIRED)}
    release.set()
    performing.join(10)
    assert calls[-1] == (performing.ident, None) and watchdog.running() == {}


def test_a_waiting_job_is_removed_and_ends_cancelled(redis, heard):
    # Given a queued job, a scheduled one and one in the retry set
    queued, batch = _push(0)
    scheduled = client.push({"class": Loops.wire_name(), "args": [0], "queue": "default", "at": time.time() + 600})
    retrying = client.push({"class": Loops.wire_name(), "args": [0], "queue": "default", "retry_count": 0, "error_message": "x"})
    raw = redis.lpop(keys.queue("default"))  # the retrying one is the last pushed: moved to the retry set by hand
    redis.zadd(keys.RETRY, {raw: time.time() + 600})
    # When each is cancelled
    answers = api.cancel_many([queued, scheduled, retrying])
    # Then each was removed where it waited, and ended cancelled through the door
    assert [(answer.outcome, answer.where) for answer in answers] == [
        (CancelOutcome.CANCELLED, "queue default"),
        (CancelOutcome.CANCELLED, "schedule"),
        (CancelOutcome.CANCELLED, "retry"),
    ]
    assert redis.llen(keys.queue("default")) == 0 and redis.zcard(keys.SCHEDULE) == 0 and redis.zcard(keys.RETRY) == 0
    assert sorted(jid for hook, jid, reason in heard if reason == "cancelled") == sorted([queued, scheduled, retrying])
    assert client.push({"class": Loops.wire_name(), "args": [0], "queue": "default", "unique_for": 600}) is not None
    status = BatchStatus.read(batch.bid)
    assert status is not None and status.failed == 1
    # And cancelling again is a no-op that says so
    again = api.cancel(queued)
    assert again.outcome is CancelOutcome.ENDED and "already ended" in again.message


def test_an_unknown_jid_is_a_no_op_that_says_so(redis):
    answer = api.cancel("0" * 24)
    assert answer.outcome is CancelOutcome.NOT_FOUND
    assert "nothing to cancel" in answer.message


def test_the_listener_hears_requests_published_and_those_asked_before_it_subscribed(redis):
    # Given a cancel asked while no listener was subscribed
    cancellation.request(get_redis(), ["early"])
    heard_jids: list[str] = []
    listener = CancelListener(client=get_redis(), make_subscriber=new_redis, on_cancel=lambda jid: heard_jids.append(jid) or False)
    # When a listener starts, and another cancel is published
    listener.start()
    try:
        wait_until(lambda: listener.subscribed, message="the listener subscribed")
        cancellation.request(get_redis(), ["late-1", "late-2"])
        wait_until(lambda: "late-2" in heard_jids, message="the published cancel was heard")
    finally:
        listener.stop()
    # Then it heard both: the remembered one when it subscribed, the new ones from the channel
    assert heard_jids == ["early", "late-1", "late-2"]


def test_requests_are_remembered_for_a_day_only(redis):
    # Given a request made more than a day ago, When a new one is made
    cancellation.request(get_redis(), ["old"], at=time.time() - cancellation.RETENTION_SECONDS - 10)
    cancellation.request(get_redis(), ["new"])
    # Then only the new one is remembered
    assert list(cancellation.recent(get_redis(), since=0)) == ["new"]


def test_the_jobs_command_cancels_and_reports(redis):
    jid, _ = _push(0)
    out = StringIO()
    call_command("jobs", "cancel", jid, "f" * 24, stdout=out)
    assert f"{jid}: removed from queue default and cancelled" in out.getvalue()
    assert "nothing to cancel" in out.getvalue()
    out = StringIO()
    call_command("jobs", "--json", "cancel", jid, stdout=out)
    assert json.loads(out.getvalue()) == [{"jid": jid, "outcome": "ended", "where": "failed: cancelled"}]


@pytest.fixture
def staff(django_user_model) -> Client:
    user = django_user_model.objects.create_user("ops-cancel", password="pw-ops-123", is_staff=True)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    return browser


def test_the_busy_page_cancels_with_a_post_behind_csrf_for_staff_only(redis, staff, django_user_model):
    jid, _ = _push(0)
    url = reverse("jobsapp:cancel_action")
    # A member who is not staff is refused, and so is a POST without the CSRF token
    member = Client()
    member.force_login(django_user_model.objects.create_user("member-cancel", password="pw-member-123"))
    assert member.post(url, {"jid": jid}).status_code == 403
    assert staff.post(url, {"jid": jid}).status_code == 403
    assert staff.get(url).status_code == 405
    assert redis.llen(keys.queue("default")) == 1
    # With the token from a rendered page, the job is cancelled and the page says so
    token = staff.get(reverse("jobsapp:queue", args=["default"])).cookies["csrftoken"].value
    response = staff.post(url, {"jid": jid, "csrfmiddlewaretoken": token}, follow=True)
    assert response.status_code == 200
    assert "cancelled; it will not run" in response.content.decode()
    assert redis.llen(keys.queue("default")) == 0


def test_celery_revoke_with_terminate_cancels_a_job_a_worker_has_taken(redis):
    # Given a job a worker fetched (in its in-flight list, not yet in any heartbeat)
    jid, _ = _push(60)
    _fetch(redis)
    redis.sadd(keys.INFLIGHT_INDEX, IDENTITY)
    heard_jids: list[str] = []
    listener = CancelListener(client=get_redis(), make_subscriber=new_redis, on_cancel=lambda each: heard_jids.append(each) or True)
    listener.start()
    try:
        wait_until(lambda: listener.subscribed, message="the listener subscribed")
        # When Celery's revoke(terminate=True) is called, with Celery's default signal
        assert revoke(jid, terminate=True, signal="SIGTERM") == 1
        # Then the worker processes were told to cancel it
        wait_until(lambda: jid in heard_jids, message="the cancel was published")
    finally:
        listener.stop()
    # And without terminate a running task is left alone, as in Celery
    assert revoke(jid) == 0


def test_the_busy_page_shows_a_cancel_button_for_each_running_job(redis, staff):
    from tests.jobsapp import sidekiq_data

    # Given a live process running a job
    populated = sidekiq_data.populate(redis)
    # When staff open the Busy page
    page = staff.get(reverse("jobsapp:busy")).content.decode()
    # Then the running job has a Cancel form posting its jid to the cancel action
    assert f'action="{reverse("jobsapp:cancel_action")}"' in page
    assert f'name="jid" value="{populated["running"]}"' in page and ">Cancel<" in page
