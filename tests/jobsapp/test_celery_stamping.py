"""Celery's stamping on ``jobsapp.celery``: how stamps merge, how a visitor walks a canvas, what
a push carries and publishes, what the worker's request sees, and tasks revoked by stamp (on a
real worker for the last ones: tests/celery_sample/tasks.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobsapp import api
from jobsapp.celery import Celery, TaskRevokedError, chain, chord, group, signals
from jobsapp.celery.canvas import StampingVisitor
from jobsapp.celery.stamping import STAMPS_KEY, revoked_stamps
from jobsapp.errors import JobCancelled
from tests.celery_sample import tasks as sample
from tests.workers import WorkerProcess, wait_until

SAMPLE_SETTINGS = {"DJANGO_SETTINGS_MODULE": "tests.celery_sample.settings"}
TIMEOUT = 20


class Fixed(StampingVisitor):
    """Stamps each task with the given headers."""

    def __init__(self, **stamps):
        self.stamps = stamps

    def on_signature(self, sig, **headers):
        return dict(self.stamps)


class Recording(StampingVisitor):
    """Records the hooks called, in order, and stamps each task with ``seen: 1``."""

    def __init__(self):
        self.calls: list[str] = []

    def _record(self, name, sig):
        self.calls.append(f"{name}:{getattr(sig, 'task', sig)}")

    def on_group_start(self, group, **headers):
        self.calls.append("group_start")
        return {}

    def on_group_end(self, group, **headers):
        self.calls.append("group_end")

    def on_chain_start(self, chain, **headers):
        self.calls.append("chain_start")
        return {"in_chain": True}

    def on_chain_end(self, chain, **headers):
        self.calls.append("chain_end")

    def on_chord_body(self, sig, **headers):
        self.calls.append("chord_body")
        return {"body": True}

    def on_callback(self, callback, **headers):
        self._record("callback", callback)
        return {"linked": "callback"}

    def on_errback(self, errback, **headers):
        self._record("errback", errback)
        return {"linked": "errback"}

    def on_signature(self, sig, **headers):
        self._record("signature", sig)
        return {"seen": 1}


def _stamps(sig) -> dict:
    options = sig["options"]
    return {name: options[name] for name in options.get("stamped_headers", [])}


# --- merge rules ---------------------------------------------------------------------------


def test_a_stamp_becomes_an_option_listed_in_stamped_headers():
    # Given a task signature, When it is stamped by a visitor and by keyword
    sig = sample.reports_stamps.si()
    sig.stamp(Fixed(monitoring_id="m-1"), tenant="acme")
    # Then each stamp is an option, and stamped_headers names each once
    assert sig.options["monitoring_id"] == "m-1" and sig.options["tenant"] == "acme"
    assert sorted(sig.options["stamped_headers"]) == ["monitoring_id", "tenant"]


def test_a_stamp_given_again_is_replaced_or_with_append_stamps_aggregated():
    # Given a task stamped once
    sig = sample.reports_stamps.si()
    sig.stamp(Fixed(stamp=1))
    # When it is stamped again with another value, Then the new value replaces it
    sig.stamp(Fixed(stamp=2))
    assert sig.options["stamp"] == 2
    # When it is stamped again with append_stamps, Then both values are kept in a list
    sig.stamp(Fixed(stamp=3), append_stamps=True)
    assert sig.options["stamp"] == [3, 2]
    # And a list stamp stamped again is extended
    listed = sample.reports_stamps.si()
    listed.stamp(Fixed(tags=["a"]))
    listed.stamp(Fixed(tags=["b"]))
    assert listed.options["tags"] == ["b", "a"] and listed.options["stamped_headers"] == ["tags"]


def test_the_visitor_wins_over_the_keyword_headers_and_a_visitors_dict_is_not_changed():
    # Given a visitor whose headers are a shared dict, and a keyword header of the same name
    shared = {"owner": "visitor"}

    class Shared(StampingVisitor):
        def on_signature(self, sig, **headers):
            return shared

    sig = sample.reports_stamps.si()
    sig.stamp(Shared(), owner="keyword")
    # Then the keyword's value stays (Celery merges the visitor's into the headers without replacing them)
    assert sig.options["owner"] == "keyword"
    # And the visitor's dict was not written to
    assert shared == {"owner": "visitor"}


def test_stamped_headers_are_not_overridden_by_later_options_but_set_changes_them():
    # Given a stamped signature
    sig = sample.reports_stamps.si()
    sig.stamp(Fixed(stamp="first"))
    # When a clone or an application gives the same option, Then the stamp keeps its value
    assert sig.clone(stamp="later", stamped_headers=[]).options["stamp"] == "first"
    assert sig.clone(stamp="later").options["stamped_headers"] == ["stamp"]
    # When set() gives it (Celery's options.update), Then it changes
    assert sig.set(stamp="set").options["stamp"] == "set"


def test_an_unstamped_option_is_still_refused():
    # Given a stamped signature, When an option neither honoured nor stamped is set, Then it is a TypeError
    sig = sample.reports_stamps.si()
    sig.stamp(Fixed(stamp=1))
    with pytest.raises(TypeError, match="unexpected option 'nonsense'"):
        sig.set(nonsense=1)


def test_a_visitor_must_define_on_signature():
    # Given a visitor that does not say what to stamp, When it stamps a task, Then it says what it lacks
    with pytest.raises(NotImplementedError, match="on_signature"):
        sample.reports_stamps.si().stamp(StampingVisitor())


# --- canvas visiting ---------------------------------------------------------------------


def test_a_chord_visits_its_header_its_callback_and_their_links():
    # Given a chord whose header holds a chain and whose callback has a callback and an errback
    body = sample.reports_stamps.si()
    body.link(sample.logs.si("done"))
    body.link_error(sample.logs.si("failed"))
    canvas = chord([sample.reports_stamps.si(), chain(sample.reports_stamps.si(), sample.logs.si("x"))], body)
    visitor = Recording()
    # When the chord is stamped
    canvas.stamp(visitor)
    # Then the header is visited as a group, the chain inside it as a chain, then the callback and its links
    assert visitor.calls[0] == "group_start"
    assert visitor.calls.index("chain_start") < visitor.calls.index("chain_end") < visitor.calls.index("group_end")
    assert visitor.calls[visitor.calls.index("group_end") + 1] == "chord_body"
    assert "callback:tests.celery_sample.tasks.logs" in visitor.calls and "errback:tests.celery_sample.tasks.logs" in visitor.calls
    # And every task is stamped, the chain's with its own headers too, the callback with on_chord_body's
    header = canvas.tasks
    assert _stamps(header[0]) == {"seen": 1}
    assert [_stamps(each) for each in header[1].tasks] == [{"seen": 1, "in_chain": True}] * 2
    stamped_body = canvas.body
    assert _stamps(stamped_body) == {"seen": 1, "body": True}
    # And the callback's links carry the headers given to the callback and the visitor's for links
    (callback,) = stamped_body.options["link"]
    (errback,) = stamped_body.options["link_error"]
    assert _stamps(callback) == {"seen": 1, "body": True, "linked": "callback"}
    assert _stamps(errback) == {"seen": 1, "body": True, "linked": "errback"}


def test_links_stored_as_plain_dicts_are_stamped_too():
    # Given a task whose callback and errback are plain dicts in its options
    sig = sample.reports_stamps.si()
    sig["options"]["link"] = dict(sample.logs.si("ok"))
    sig["options"]["link_error"] = dict(sample.logs.si("failed"))
    # When it is stamped
    sig.stamp(Fixed(stamp=42))
    # Then each is stamped, kept as a list of signature dicts
    assert [_stamps(each) for each in sig.options["link"]] == [{"stamp": 42}]
    assert [_stamps(each) for each in sig.options["link_error"]] == [{"stamp": 42}]


def test_a_group_stamps_each_task_and_a_generator_header_is_stamped_as_it_is_read(redis):
    # Given a group, and a chord whose header is a generator
    members = group(sample.reports_stamps.si(), sample.reports_stamps.si())
    members.stamp(Fixed(stamp="g"))
    lazy = chord((sample.reports_stamps.si() for _ in range(2)), sample.reports_stamps.si())
    # When they are stamped, Then the group's tasks are
    assert [_stamps(each) for each in members.tasks] == [{"stamp": "g"}] * 2
    lazy.stamp(Fixed(stamp="lazy"))
    # And the generator's tasks are pushed stamped when the chord is applied
    result = lazy.apply_async()
    pushed = [api.find_job(each.id) for each in result.parent.results]
    assert [location.record.item[STAMPS_KEY] for location in pushed] == [{"stamp": "lazy"}] * 2


# --- publishing -----------------------------------------------------------------------------


def test_a_stamped_push_publishes_its_stamps_in_the_headers_and_carries_them(redis):
    # Given a before_task_publish receiver
    seen: list[tuple[dict, dict]] = []

    def receiver(headers=None, properties=None, **extra):
        seen.append((dict(headers), dict(properties)))

    signals.before_task_publish.connect(receiver)
    try:
        sig = sample.reports_stamps.si()
        sig.stamp(Fixed(stamp=42, tags=[4, 2]))
        sig.link(sample.logs.si("after"))
        sig.stamp(Fixed(stamp=42))
        # When the stamped task is pushed
        result = sig.apply_async()
    finally:
        signals.before_task_publish.disconnect(receiver)
    # Then the receiver gets Celery's stamped_headers and stamps (a list stays a list), and no stamp in the properties
    ((headers, properties),) = seen
    assert sorted(headers["stamped_headers"]) == ["stamp", "tags"]
    assert headers["stamps"] == {"stamp": 42, "tags": [4, 2]}
    assert "stamped_headers" not in properties and "stamp" not in properties
    # And the job's payload carries the stamps, and its link carries its own stamped options
    item = api.find_job(result.id).record.item
    assert item[STAMPS_KEY] == {"stamp": 42, "tags": [4, 2]}
    (link,) = item["celery_link"]
    assert link["options"]["stamped_headers"] == ["stamp"] and link["options"]["stamp"] == 42


def test_an_unstamped_task_publishes_empty_stamps_and_carries_none(redis):
    seen: list[dict] = []

    def receiver(headers=None, **extra):
        seen.append(dict(headers))

    signals.before_task_publish.connect(receiver)
    try:
        result = sample.reports_stamps.delay()
    finally:
        signals.before_task_publish.disconnect(receiver)
    assert seen[0]["stamped_headers"] == [] and seen[0]["stamps"] == {}
    assert STAMPS_KEY not in api.find_job(result.id).record.item


def test_an_eager_run_sees_the_stamps():
    # Given a stamped task, When it is applied here (eagerly), Then its request has the stamps
    sig = sample.reports_stamps.si()
    sig.stamp(stamp=1)
    assert sig.apply().get() == {"stamps": {"stamp": 1}, "stamped_headers": ["stamp"]}


# --- on a worker ---------------------------------------------------------------------------


@pytest.fixture
def worker(redis_server) -> Iterator[None]:
    with WorkerProcess(["-c", "2"], SAMPLE_SETTINGS, redis_url=redis_server.url):
        yield


@pytest.fixture(autouse=True)
def _no_revoked_stamps_left(redis) -> Iterator[None]:
    yield
    revoked_stamps.clear()


@pytest.mark.slow
def test_the_request_sees_the_stamps_and_a_retry_and_a_replacement_keep_them(worker):
    # Given stamped tasks: one that reports its request, one retried once, one replacing itself
    reporter = sample.reports_stamps.si()
    reporter.stamp(Fixed(stamp=42, tags=["a", "b"]))
    retried = sample.reports_stamps_after_a_retry.si()
    retried.stamp(Fixed(stamp=42))
    replaced = sample.replaces_itself_with_reporter.si()
    replaced.stamp(Fixed(stamp=42))
    # When a worker runs them
    reported = reporter.apply_async().get(timeout=TIMEOUT)
    after_retry = retried.apply_async().get(timeout=TIMEOUT)
    replacement = replaced.apply_async().get(timeout=TIMEOUT)
    # Then the request has the stamps (a list stays a list) and the stamped headers' names
    assert reported == {"stamps": {"stamp": 42, "tags": ["a", "b"]}, "stamped_headers": ["stamp", "tags"]}
    # And the retried run still has them
    assert after_retry == {"retries": 1, "stamps": {"stamp": 42}}
    # And the replacement has the replaced task's stamps and those its on_replace stamped
    assert replacement == {"stamps": {"stamp": 42, "replaced": "yes"}, "stamped_headers": ["replaced", "stamp"]}
    # And a task without stamps sees none
    assert sample.reports_stamps.delay().get(timeout=TIMEOUT) == {"stamps": {}, "stamped_headers": []}


@pytest.mark.slow
def test_tasks_stamped_with_a_revoked_stamp_end_revoked_and_what_follows_fails(worker):
    # Given a revoked stamp (a value of a list), and tasks stamped with it or with another value
    Celery("stamping").control.revoke_by_stamped_headers({"monitoring_id": ["revoked-1", "revoked-2"]})
    assert sorted(revoked_stamps["monitoring_id"]) == ["revoked-1", "revoked-2"]
    doomed = sample.reports_stamps.si()
    doomed.stamp(Fixed(monitoring_id="revoked-2"))
    listed = sample.reports_stamps.si()
    listed.stamp(Fixed(monitoring_id=["other", "revoked-1"]))
    spared = sample.reports_stamps.si()
    spared.stamp(Fixed(monitoring_id="other"))
    steps = chain(sample.reports_stamps.si(), doomed.clone(), sample.logs.si("never"))
    # When a worker is given them
    doomed_result, listed_result, spared_result = doomed.apply_async(), listed.apply_async(), spared.apply_async()
    chain_result = steps.apply_async()
    # Then a task carrying a revoked value ends REVOKED unrun, as a revoked task
    for result in (doomed_result, listed_result):
        with pytest.raises(TaskRevokedError):
            result.get(timeout=TIMEOUT)
        assert result.state == "REVOKED" and result.ready() and not result.failed()
    # And one whose stamp is not revoked runs
    assert spared_result.get(timeout=TIMEOUT)["stamps"] == {"monitoring_id": "other"}
    # And the steps after a revoked chain step fail with its error
    with pytest.raises(TaskRevokedError):
        chain_result.get(timeout=TIMEOUT)
    # When the revoked stamps are cleared, Then a task stamped so runs again
    revoked_stamps.clear()
    assert dict(revoked_stamps) == {}
    assert doomed.clone().apply_async().get(timeout=TIMEOUT)["stamps"] == {"monitoring_id": "revoked-2"}


@pytest.mark.slow
def test_a_revoked_task_anywhere_in_a_canvas_fails_the_canvas(worker):
    # Given a revoked stamp and one task stamped with it (Celery's test_revoked_by_headers_complex_canvas, without sleeps)
    Celery("stamping").control.revoke_by_stamped_headers({"monitoring_id": "4242"})
    stamped = sample.reports_stamps.si()
    stamped.stamp(Fixed(monitoring_id="4242"))
    other = sample.reports_stamps.si
    canvases = [
        group([stamped.clone()]),
        chord(group([stamped.clone()]), other()),
        chord(group([other()]), stamped.clone()),
        chain(stamped.clone()),
        group([other(), stamped.clone(), other()]),
        chord([other(), stamped.clone()], other()),
        chord([other(), other()], stamped.clone()),
        chain(other(), stamped.clone()),
        chain(other(), group([other(), stamped.clone(), other()])),
        chain(other(), group([other(), stamped.clone()]), other()),
        chain(other(), group([other(), other()]), stamped.clone()),
    ]
    for canvas in canvases:
        # When it is applied, Then its result raises TaskRevokedError
        with pytest.raises(TaskRevokedError):
            canvas.apply_async().get(timeout=TIMEOUT)


@pytest.mark.slow
def test_terminating_by_stamp_cancels_the_running_tasks_that_carry_it(worker, redis):
    # Given a stamped task running on a worker (as the worker's heartbeat shows it)
    sig = sample.waits_untracked.si()
    sig.stamp(Fixed(job="long"))
    result = sig.apply_async()
    wait_until(lambda: any(work.record.jid == result.id for work in api.WorkSet.all()), timeout_seconds=TIMEOUT)
    # When its stamp is revoked with terminate=True
    replies = Celery("stamping").control.revoke_by_stamped_headers({"job": "long"}, terminate=True, reply=True)
    # Then the reply names the stamps that ended running tasks, and the task ends REVOKED, cancelled
    # as revoke(terminate=True) cancels a running task
    assert [reply["ok"] for each in replies for reply in each.values()] == ["headers {'job': ['long']} revoked"] * len(replies)
    with pytest.raises(JobCancelled):
        result.get(timeout=TIMEOUT)
    assert result.state == "REVOKED"


def test_revoking_by_stamp_answers_as_celery_and_the_stamps_are_kept_fleet_wide(redis):
    # Given no worker, When stamps are revoked with a reply asked
    control = Celery("stamping").control
    replies = control.revoke_by_stamped_headers({"myheader": ["myvalue"]}, terminate=False, reply=True)
    # Then the reply is Celery's, and the stamps are readable here, in Redis
    assert replies == [{"jobsapp": {"ok": "headers {'myheader': ['myvalue']} flagged as revoked, but not terminated"}}]
    assert revoked_stamps["myheader"] == ["myvalue"]
    assert control.revoke_by_stamped_headers(["color=red"]) is None
    assert dict(revoked_stamps) == {"myheader": ["myvalue"], "color": ["red"]}
    # And terminating with nothing running that matches says so
    assert control.revoke_by_stamped_headers({"color": "red"}, terminate=True, reply=True)[0]["jobsapp"]["ok"] == (
        "headers {'color': 'red'} were not terminated"
    )
    # And a header set replaces its values, a header deleted is forgotten
    revoked_stamps["color"] = ["blue"]
    del revoked_stamps["myheader"]
    assert dict(revoked_stamps) == {"color": ["blue"]}
