"""The "job ended" door (jobsapp.ending): whichever way a job's life ends, each feature it carries
hears it once: its unique lock is released (kept through a retry), its batch counts it and fires
its callback once, its periodic entry records the outcome, its retained record says how it ended,
and server middleware hears ``on_retry`` or ``on_dead`` once.

Each test takes one end-of-life path and one feature, with a job that carries all four features
(a unique lock, a batch, a periodic name, ``retain``), run by a real processor (or the recovery
sweeper) against a real Redis, or ended by an operator: deleted, cleared or killed through
``jobsapp.api``, the dashboard's forms or the ``jobs`` command."""

from __future__ import annotations

import dataclasses
import json
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from jobsapp import Job, api, celery, client, ending, keys, middleware, results
from jobsapp.batch import Batch, BatchStatus
from jobsapp.connection import get_redis
from jobsapp.errors import NoRetryError
from jobsapp.middleware import ServerMiddleware
from jobsapp.payload import compact_json, decode
from jobsapp.worker import recovery
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from tests.testapp.jobs import BatchComplete, BatchSuccess

pytestmark = pytest.mark.django_db  # a job run closes stale Django connections, as a worker does

IDENTITY = "test:1:0000000000ee"
INFLIGHT = keys.inflight(IDENTITY)
PERIODIC_NAME = "nightly-report"


class Ends(Job):
    """Ends the way it is told: "succeed", "no_retry" (NoRetryError) or "fail" (RuntimeError)."""

    def perform(self, how):
        if how == "no_retry":
            raise NoRetryError("not worth retrying")
        if how == "fail":
            raise RuntimeError("failed on purpose")
        return "done"


def _pushed(how: str = "succeed", **options) -> tuple[str, Batch]:
    """Push one ``Ends`` job carrying every feature, inside a batch whose block then closes."""
    item = {
        "class": Ends.wire_name(),
        "args": [how],
        "queue": "default",
        "unique_for": 600,
        "retain": 600,
        "periodic": PERIODIC_NAME,
        **options,
    }
    batch = Batch(on_complete=BatchComplete, on_success=BatchSuccess)
    with batch.jobs():
        jid = client.push(item)
    assert jid is not None
    return jid, batch


def _fetched(redis, *, tamper=None) -> UnitOfWork:
    """Move the queued job into this process's in-flight list, as a fetch does (``tamper`` edits
    its payload on the way, as another client could have written it)."""
    raw = redis.rpop("queue:default")
    if tamper is not None:
        item = json.loads(raw)
        tamper(item)
        raw = compact_json(item).encode()
    redis.lpush(INFLIGHT, raw)
    return UnitOfWork(raw, "default")


def _processor() -> Processor:
    return Processor(RetryPolicy(get_redis(), INFLIGHT))


def _run(redis, how: str = "succeed", *, tamper=None, **options) -> tuple[str, Batch]:
    jid, batch = _pushed(how, **options)
    _processor().process(_fetched(redis, tamper=tamper))
    return jid, batch


# --- the paths: each returns the jid and batch of a job whose life (or run) ended ------------


def succeeded(redis):
    return _run(redis, "succeed")


def no_retry(redis):
    return _run(redis, "no_retry")


def retried(redis):
    return _run(redis, "fail", retry=5)


def dead(redis):
    return _run(redis, "fail", retry=0)


def discarded(redis):
    return _run(redis, "fail", retry=False)


def hard_limit(redis):
    jid, batch = _pushed("succeed", retry=0)
    unit = _fetched(redis)
    _processor()._file_stuck(unit, decode(unit.raw), Ends, 1.0)
    return jid, batch


def expired(redis):
    return _run(redis, "succeed", expires_in=60, expires_at=time.time() - 5)


def unknown_class(redis):
    return _run(redis, "succeed", retry=0, tamper=lambda item: item.update({"class": "tests.NoSuchJob"}))


def hostile_class_name(redis):
    return _run(redis, "succeed", tamper=lambda item: item.update({"class": "__import__('os').system('true')"}))


def parked(redis):
    # a timeout no client of ours writes: the job cannot be handled and is parked as malformed
    return _run(redis, "succeed", tamper=lambda item: item.update({"timeout": "soon"}))


def poison(redis):
    jid, batch = _pushed("succeed")
    _fetched(redis)
    redis.hset(keys.RECOVERIES, jid, 2)  # recovered twice already: this third crash buries it
    recovery.recover_list(get_redis(), IDENTITY)
    return jid, batch


def malformed_in_recovery(redis):
    jid, batch = _pushed("succeed")
    unit = _fetched(redis)
    recovery._bury_malformed(get_redis(), unit.raw, inflight_key=INFLIGHT, exception=ValueError("could not be handled"))
    return jid, batch


PATHS = [succeeded, no_retry, retried, dead, discarded, hard_limit, expired, unknown_class, hostile_class_name, parked, poison]


def revoked(redis):
    jid, batch = _pushed("succeed")
    assert celery.revoke(jid) == 1
    return jid, batch


PATHS += [malformed_in_recovery, revoked]


# --- the operators' paths: jobsapp.api, and the dashboard and the jobs command acting through it


def _entry(job_set: api.JobSet, jid: str) -> api.SortedEntry:
    entry = job_set.find_job(jid)
    assert entry is not None
    return entry


def _scheduled(redis) -> tuple[str, Batch]:
    return _pushed("succeed", at=time.time() + 600)


def _staff_browser() -> Client:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("operator", password="pw-operator-123", is_staff=True)
    browser = Client()
    browser.force_login(user)
    return browser


def deleted_from_queue(redis):
    jid, batch = _pushed("succeed")
    assert api.Queue("default").delete_job(jid)
    return jid, batch


def queue_cleared(redis):
    jid, batch = _pushed("succeed")
    assert api.Queue("default").clear() == 1
    return jid, batch


def deleted_from_schedule(redis):
    jid, batch = _scheduled(redis)
    assert api.ScheduledSet().delete(_entry(api.ScheduledSet(), jid))
    return jid, batch


def schedule_cleared(redis):
    jid, batch = _scheduled(redis)
    assert api.ScheduledSet().clear() == 1
    return jid, batch


def killed_from_schedule(redis):
    jid, batch = _scheduled(redis)
    assert api.ScheduledSet().kill(_entry(api.ScheduledSet(), jid))
    return jid, batch


def deleted_from_retries(redis):
    jid, batch = retried(redis)
    assert api.RetrySet().delete(_entry(api.RetrySet(), jid))
    return jid, batch


def retries_cleared(redis):
    jid, batch = retried(redis)
    assert api.RetrySet().clear() == 1
    return jid, batch


def killed_from_retries(redis):
    jid, batch = retried(redis)
    assert api.RetrySet().kill(_entry(api.RetrySet(), jid))
    return jid, batch


def deleted_on_the_dashboard(redis):
    jid, batch = _pushed("succeed")
    response = _staff_browser().post(reverse("jobsapp:queue_action"), {"action": "delete", "queue": "default", "jid": jid})
    assert response.status_code == 302 and redis.llen("queue:default") == 0
    return jid, batch


def killed_on_the_dashboard(redis):
    jid, batch = _scheduled(redis)
    key = _entry(api.ScheduledSet(), jid).key
    response = _staff_browser().post(reverse("jobsapp:set_action", args=["scheduled"]), {"action": "kill", "key": key})
    assert response.status_code == 302 and redis.zcard("dead") == 1
    return jid, batch


def retries_cleared_by_the_jobs_command(redis):
    jid, batch = retried(redis)
    call_command("jobs", "retry", "clear", "--yes", stdout=StringIO())
    assert redis.zcard("retry") == 0
    return jid, batch


OPERATOR_PATHS = [
    deleted_from_queue,
    queue_cleared,
    deleted_from_schedule,
    schedule_cleared,
    killed_from_schedule,
    deleted_from_retries,
    retries_cleared,
    killed_from_retries,
    deleted_on_the_dashboard,
    killed_on_the_dashboard,
    retries_cleared_by_the_jobs_command,
]
PATHS += OPERATOR_PATHS
#: The paths after which the job runs again (everything else is final).
RUNS_AGAIN = {retried}
#: The paths whose job failed once and waited for its retry before its end.
RETRIED_FIRST = {retried, deleted_from_retries, retries_cleared, killed_from_retries, retries_cleared_by_the_jobs_command}
#: The paths a batch counts as a success.
BATCH_SUCCESSES = {succeeded, expired}


def _unique_lock_exists(redis) -> bool:
    return bool(redis.keys("jobsapp:unique:*"))


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.__name__)
def test_unique_lock_is_released_when_the_job_is_done_for_good_and_kept_through_a_retry(redis, path):
    # Given a unique job, When its life (or this run of it) ends this way
    path(redis)
    # Then its lock is kept only when it runs again
    assert _unique_lock_exists(redis) == (path in RUNS_AGAIN)


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.__name__)
def test_batch_counts_the_job_and_fires_its_callback_once(redis, path):
    # Given a batch of one job whose block has closed, When the job ends this way
    _, batch = path(redis)
    # Then the batch has nothing pending, counts the job on the right side, and on_complete was
    # pushed once (on_success too when the job counts as a success)
    status = BatchStatus.read(batch.bid)
    assert status is not None and status.pending == 0
    assert (status.succeeded, status.failed) == ((1, 0) if path in BATCH_SUCCESSES else (0, 1))
    callbacks = [json.loads(raw)["class"] for raw in redis.lrange("queue:callbacks", 0, -1)]
    assert callbacks.count(BatchComplete.wire_name()) == 1
    assert callbacks.count(BatchSuccess.wire_name()) == (1 if path in BATCH_SUCCESSES else 0)


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.__name__)
def test_periodic_entry_records_the_outcome(redis, path):
    # Given a job pushed by a periodic tick, When it ends this way
    jid, _ = path(redis)
    # Then its entry says how the job ended
    fields = redis.hgetall(keys.cron_job(PERIODIC_NAME))
    assert fields[b"jobsapp_last_outcome_jid"] == jid.encode()
    outcome = fields[b"jobsapp_last_outcome"].decode()
    assert outcome == "succeeded" if path is succeeded else outcome.startswith("failed: ")


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.__name__)
def test_retained_record_says_how_the_job_ended(redis, path):
    # Given a job pushed with retain, When it ends this way
    jid, _ = path(redis)
    # Then its record is finished (or waiting for its retry), never left queued or running
    record = results.get(jid)
    expected = "succeeded" if path is succeeded else "retrying" if path in RUNS_AGAIN else "failed"
    assert record is not None and record.status == expected


MOMENTS = ("admit", "start", "around", "guard", "end", "put_back")


def _spying_table(called: list[tuple[str, str]]) -> ending.Table:
    """The real table, each hook noting (moment, feature) before it does its work."""
    rows = []
    for row in ending.FEATURES:
        hooks = {}
        for moment in MOMENTS:
            hook = getattr(row, moment)
            if hook is not None:

                def spy(*args, _hook=hook, _note=(moment, row.name)):
                    called.append(_note)
                    return _hook(*args)

                hooks[moment] = spy
        rows.append(dataclasses.replace(row, **hooks))
    return ending.Table.of(tuple(rows))


def test_a_plain_job_is_heard_only_by_the_keyless_guards(redis, monkeypatch):
    # Given a table whose every hook notes its call
    called: list[tuple[str, str]] = []
    monkeypatch.setattr(ending, "TABLE", _spying_table(called))
    # When a job with none of the features runs and succeeds
    client.push({"class": Ends.wire_name(), "args": ["succeed"], "queue": "default"})
    _processor().process(_fetched(redis))
    # Then only the rows that hear every job were called (any run may be cancelled, and may
    # take a limiter's slot)
    assert called == [("guard", "cancel"), ("guard", "limits")]


def test_every_feature_hears_the_job_at_its_moments_in_table_order(redis, monkeypatch):
    # Given a table whose every hook notes its call, and a job carrying every feature
    called: list[tuple[str, str]] = []
    monkeypatch.setattr(ending, "TABLE", _spying_table(called))
    jid, _ = _pushed("succeed", unique_until="start", timeout=30, expires_in=600)
    # When it runs and succeeds
    _processor().process(_fetched(redis))
    # Then each feature heard it at its moments, through the table alone
    assert called == [
        ("admit", "expiry"),
        ("start", "unique"),
        ("start", "timeouts"),
        ("guard", "cancel"),  # the guards wrap perform before the run begins (the job's timeout is the cancel row's guard)
        ("guard", "limits"),
        ("around", "results"),
        ("end", "results"),
        ("end", "periodic"),
        ("end", "unique"),
        ("end", "batches"),
    ]
    record = results.get(jid)
    assert record is not None and record.status == "succeeded" and not _unique_lock_exists(redis)


def test_a_row_for_every_job_may_only_guard(redis):
    # Given a feature without a payload key that would hear every job's end, Then the table refuses it
    with pytest.raises(ValueError, match="only its guard"):
        ending.Table.of((ending.Feature(name="costly", key=None, end=lambda *_args: None),))


def test_a_failing_hook_does_not_keep_the_others_from_running(redis, monkeypatch):
    # Given a first end hook that raises
    called: list[str] = []

    def broken(*_args):
        raise RuntimeError("hook bug")

    rows = (
        ending.Feature(name="results", key="retain", end=broken),
        ending.Feature(name="batches", key="bid", end=lambda *_args: called.append("bid")),
    )
    monkeypatch.setattr(ending, "TABLE", ending.Table.of(rows))
    # When a job carrying both ends, Then the second still runs and nothing is raised
    ending.finish(get_redis(), {"jid": "a" * 24, "retain": 60, "bid": "b1"}, ending.Fate.DEAD)
    assert called == ["bid"]


HEARD: list[tuple[str, str, str]] = []


class Heard(ServerMiddleware):
    """Server middleware that notes every ending it hears: (hook, jid, reason)."""

    def on_retry(self, job_class, item, exception, *, retry_count, retry_limit, run_at):
        HEARD.append(("on_retry", item.get("jid"), ""))

    def on_dead(self, job_class, item, exception, *, reason):
        HEARD.append(("on_dead", item.get("jid"), reason))

    def on_requeue(self, item, *, reason):
        HEARD.append(("on_requeue", item.get("jid"), reason))


@pytest.fixture
def heard():
    middleware.server_chain().add(Heard)
    HEARD.clear()
    return HEARD


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.__name__)
def test_server_middleware_hears_each_ending_once(redis, heard, path):
    # Given server middleware (tracking's place), When a job's life (or this run of it) ends this way
    jid, _ = path(redis)
    # Then it heard on_retry for a retry, and on_dead once for a job that will not run again
    hooks = [hook for hook, heard_jid, _ in heard if heard_jid == jid]
    expected = ["on_retry"] if path in RETRIED_FIRST else []
    if path is not succeeded and path not in RUNS_AGAIN:
        expected.append("on_dead")
    assert hooks == expected


def test_a_deleted_unique_job_can_be_pushed_again_at_once(redis):
    # Given a queued unique job (its lock held for 600 s)
    item = {"class": Ends.wire_name(), "args": ["succeed"], "queue": "default", "unique_for": 600}
    jid = client.push(dict(item))
    assert jid is not None and client.push(dict(item)) is None
    # When an operator deletes it, Then the same push is accepted at once
    assert api.Queue("default").delete_job(jid)
    assert client.push(dict(item)) is not None


def test_an_operators_delete_taken_twice_tells_the_door_once(redis, heard):
    # Given a queued job with a batch, read by two operators at once
    jid, batch = _pushed("succeed")
    record = api.Queue("default").find_job(jid)
    assert record is not None
    # When both delete it, Then the second finds it gone, and its ending was heard once
    assert api.Queue("default").delete(record) and not api.Queue("default").delete(record)
    assert [hook for hook, heard_jid, _ in heard if heard_jid == jid] == ["on_dead"]
    assert heard[-1][2] == "deleted"
    status = BatchStatus.read(batch.bid)
    assert status is not None and (status.pending, status.failed) == (0, 1)


def test_deleting_a_dead_job_tells_no_one_it_ended_already(redis, heard):
    # Given a job that died (its features and middleware heard it)
    jid, _ = dead(redis)
    assert [hook for hook, heard_jid, _ in heard if heard_jid == jid] == ["on_dead"]
    # When an operator deletes it from the dead set, and clears the set
    assert api.DeadSet().delete(_entry(api.DeadSet(), jid))
    api.DeadSet().clear()
    # Then no second ending was heard
    assert [hook for hook, heard_jid, _ in heard if heard_jid == jid] == ["on_dead"]


@pytest.mark.parametrize("where", ["retries", "scheduled", "dead"])
def test_a_job_an_operator_sends_to_its_queue_is_put_back_not_ended(redis, heard, where):
    # Given a job waiting in a set (its retry, its schedule, or dead)
    if where == "retries":
        jid, _ = retried(redis)
        job_set: api.JobSet = api.RetrySet()
    elif where == "scheduled":
        jid, _ = _scheduled(redis)
        job_set = api.ScheduledSet()
    else:
        jid, _ = dead(redis)
        job_set = api.DeadSet()
    heard.clear()
    # When an operator sends it to its queue now ("retry now", "add to queue")
    entry = _entry(job_set, jid)
    assert job_set.retry(entry) if where != "scheduled" else job_set.add_to_queue(entry)
    # Then it waits in its queue, its record says so, and middleware heard on_requeue, no ending
    assert redis.llen("queue:default") == 1
    record = results.get(jid)
    assert record is not None and record.status == "queued"
    assert heard == [("on_requeue", jid, "operator")]


def test_a_clear_decodes_only_the_jobs_someone_could_hear(redis):
    # Given no server middleware, a plain job's bytes and a batch job's bytes
    plain = b'{"class":"X","args":["bid"],"queue":"default","jid":"000000000000000000000001"}'
    in_a_batch = b'{"class":"X","args":[],"queue":"default","jid":"000000000000000000000002","bid":"b1"}'
    # Then only the batch job needs decoding (a key's name as an argument is a harmless false yes)
    assert not ending.may_hear(plain.replace(b'"bid"', b'"b"'))
    assert ending.may_hear(in_a_batch) and ending.may_hear(plain)
    # And with server middleware configured, every job may be heard
    middleware.server_chain().add(Heard)
    assert ending.may_hear(plain.replace(b'"bid"', b'"b"'))


DEATHS: list[str] = []


def note_death(item, exception):
    DEATHS.append(item["jid"])


def test_an_operators_kill_calls_the_death_handlers_as_sidekiqs_api_kill(redis, settings):
    # Given death handlers, and a job waiting for its retry
    settings.JOBSAPP = {**settings.JOBSAPP, "DEATH_HANDLERS": ["tests.jobsapp.test_ending.note_death"]}
    DEATHS.clear()
    jid, _ = retried(redis)
    # When an operator kills it, Then the handlers heard it once (a delete calls none)
    assert api.RetrySet().kill(_entry(api.RetrySet(), jid))
    assert DEATHS == [jid]
    other, _ = _scheduled(redis)
    assert api.ScheduledSet().delete(_entry(api.ScheduledSet(), other))
    assert DEATHS == [jid]
