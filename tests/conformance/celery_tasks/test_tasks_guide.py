"""Celery's tasks guide (docs/userguide/tasks.rst of the pinned Celery sdist; guide_port.py
assembles its blocks, imports changed, into ``celery_guide.tasks``) run by a real runworkers on a
real Redis, asserting what the guide says of each block. Blocks this layer refuses must fail
loudly, at declaration or at call.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import warnings

import pytest
from django.contrib.auth.models import User

from jobsapp import results
from jobsapp.celery import Celery, shared_task
from jobsapp.celery.exceptions import Reject
from tests.conformance.celery_tasks.guide_port import PACKAGE, ported_dir
from tests.workers import ROOT_DIR, WorkerProcess, wait_until, worker_database_url

TIMEOUT = 15
GUIDE_DIR = str(ported_dir())
if GUIDE_DIR not in sys.path:
    sys.path.insert(0, GUIDE_DIR)
guide = importlib.import_module(f"{PACKAGE}.tasks")


def _retry_in_seconds(redis, task_id: str) -> float:
    raw = next(raw for raw in redis.zrange("retry", 0, -1) if task_id.encode() in raw)
    return redis.zscore("retry", raw) - time.time()


def test_names_as_the_guide_gives_them():
    assert guide.add_5.name == "sum-of-two-numbers"
    assert guide.add_6.name == "tasks.add"
    assert guide.add.name == "celery_guide.tasks.add"
    # gen_task_name overridden on the app: "moduleA.tasks.taskA" becomes "moduleA.taskA"
    assert guide.taskA.name == "celery_guide.taskA"
    # task_cls: every task of that app is an instance of the class, with its db attribute
    assert isinstance(guide.app_wide_rows, guide.DatabaseTask)
    # class-based retry options are class attributes of the base, as in Celery
    assert (guide.fails_once_with_type_error.max_retries, guide.fails_once_with_type_error.retry_backoff_max) == (5, 700)


def test_refused_blocks_fail_loudly_at_declaration_or_call():
    # Argument checking: add.delay(8) is a TypeError at call time; typing=False lets it through
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        guide.add.delay(8)

    # Argument validation with Pydantic: accepted (arguments annotated with a model are validated into it)
    @shared_task(name="guide.accepted.pydantic", pydantic=True)
    def with_models(x):
        return x

    assert with_models.apply((3,)).get() == 3

    # Passing a model instance (the guide's expand_abbreviations(article)): not JSON, refused at call
    with pytest.raises(TypeError, match="JSON"):
        guide.add.delay(User(username="x"), 1)

    # A class-based task registered with app.register_task: registered under module.ClassName
    registered = Celery("guide").register_task(guide.NaiveAuthenticateServer())
    assert registered.name.endswith(".NaiveAuthenticateServer") and registered.name in Celery("guide").tasks
    # Hiding arguments with argsrepr/kwargsrepr: accepted, with a warning that they are shown as given
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        guide.add.apply_async((2, 3), argsrepr="(<secret-x>, <secret-y>)")
    assert any("argsrepr" in str(warning.message) for warning in caught)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_tasks_guide_on_a_real_worker(redis_server, redis):
    env = {
        "CONFORMANCE_APPS": PACKAGE,
        "PYTHONPATH": os.pathsep.join([GUIDE_DIR, str(ROOT_DIR)]),
        "DJANGO_SETTINGS_MODULE": "tests.conformance.celery_tasks.settings",
        "DATABASE_URL": worker_database_url(),
    }
    redis.sadd("tasks.revoked", "revoked-by-hand")
    with WorkerProcess(["-c", "4"], env, redis_url=redis_server.url) as worker:
        # Basics
        assert guide.create_user.delay("george", "password").get(timeout=TIMEOUT) is None
        assert guide.create_user_2.delay("paul", "password").get(timeout=TIMEOUT) is None
        assert set(User.objects.values_list("username", flat=True)) == {"george", "paul"}
        assert guide.add.delay(2, 2).get(timeout=TIMEOUT) == 4
        assert guide.add_2.delay(1, 2).get(timeout=TIMEOUT) == 31  # both decorators ran, under the task
        bound = guide.add_3.delay(1, 2)
        assert bound.get(timeout=TIMEOUT) is None and bound.successful()
        # Task inheritance: on_failure prints the task id and the exception
        inherited = guide.add_4.delay(1, 2)
        with pytest.raises(KeyError):
            inherited.get(timeout=TIMEOUT)
        wait_until(lambda: f"{inherited.id!r} failed: KeyError()" in worker.output, timeout_seconds=TIMEOUT)
        # Names
        assert guide.add_5.delay(1, 2).get(timeout=TIMEOUT) == 3
        assert guide.taskA.delay().get(timeout=TIMEOUT) == "A"
        # Task request: dump_context prints the request's id, args and kwargs
        dumped = guide.dump_context.delay(2, 3)
        dumped.get(timeout=TIMEOUT)
        wait_until(lambda: f"Executing task id {dumped.id}, args: [2, 3] kwargs: {{}}" in worker.output, timeout_seconds=TIMEOUT)
        # Logging
        assert guide.add_7.delay(4, 4).get(timeout=TIMEOUT) == 8
        # Retrying: retry() files the task for later (default_retry_delay 3 minutes, or countdown)
        tweet = guide.send_twitter_status.delay("oauth", "hello")
        wait_until(lambda: tweet.state == "RETRY", timeout_seconds=TIMEOUT)
        assert "FailWhaleError" in repr(tweet.result) and 170 <= _retry_in_seconds(redis, tweet.id) <= 181
        delayed = guide.add_8.delay(1, 2)
        wait_until(lambda: delayed.state == "RETRY", timeout_seconds=TIMEOUT)
        assert isinstance(delayed.result, ValueError) and 50 <= _retry_in_seconds(redis, delayed.id) <= 61
        for refresh in (guide.refresh_timeline, guide.refresh_timeline_2, guide.refresh_timeline_3):
            timeline = refresh.delay(refresh.__name__)
            wait_until(lambda timeline=timeline: timeline.state == "RETRY", timeout_seconds=TIMEOUT)
            assert 170 <= _retry_in_seconds(redis, timeline.id) <= 181
        assert guide.x.delay().get(timeout=TIMEOUT) is None
        # Class-based retry options: retry_backoff=True without jitter retries 1 s later
        assert guide.fails_once_with_type_error.delay().get(timeout=TIMEOUT) == 1
        # Custom states: PROGRESS while running, then SUCCESS
        uploaded = guide.upload_files.delay(["a.txt", "b.txt"])
        assert uploaded.get(timeout=TIMEOUT) is None and uploaded.state == "SUCCESS"
        # Ignore: a task in the revoked set records nothing; get_tweets stores its own SUCCESS
        revoked = guide.some_task.apply_async(task_id="revoked-by-hand")
        wait_until(lambda: (record := results.get(revoked.id)) is not None and record.ignored, timeout_seconds=TIMEOUT)
        assert revoked.state == "PENDING"
        not_revoked = guide.some_task.delay()
        assert not_revoked.get(timeout=TIMEOUT) is None
        tweets = guide.get_tweets.delay("bob")
        assert tweets.get(timeout=TIMEOUT) == ["bob's tweet", "bob's other tweet"] and tweets.state == "SUCCESS"
        # Reject: without requeue, FAILURE with the reason (the dead set); with requeue, run again
        for scene in ("huge.scene", "nomem.scene"):
            rejected = guide.render_scene.delay(scene)
            with pytest.raises(Reject):
                rejected.get(timeout=TIMEOUT)
            assert rejected.failed()
        assert guide.render_scene.delay("small.scene").get(timeout=TIMEOUT) is None
        # its last branch, self.retry(exc, countdown=10), passes exc as retry's args: refused loudly
        with pytest.raises(TypeError, match="pass an exception as exc="):
            guide.render_scene.delay("broken.scene").get(timeout=TIMEOUT)
        assert guide.requeues.delay().get(timeout=TIMEOUT) is None
        wait_until(lambda: "received two times" in worker.output, timeout_seconds=TIMEOUT)
        # Custom task classes: the base's cached attribute is made once per worker process
        assert [guide.process_rows.delay().get(timeout=TIMEOUT) for _ in range(3)] == [None, None, None]
        rows = [json.loads(raw) for raw in redis.lrange("guide:notes", 0, -1) if json.loads(raw)[0] == "row"]
        assert rows == [["row", 1]] * 3  # every row read through the one connection
        assert guide.app_wide_rows.delay().get(timeout=TIMEOUT) == [2]  # its own task instance: a second connection
        # Handlers: before_start, on_success, after_return, in that order
        handled = guide.my_task.delay(2, 3)
        assert handled.get(timeout=TIMEOUT) == 5
        lines = [
            f"Task {handled.id} starting with args [2, 3]",
            f"Task {handled.id} succeeded with result: 5",
            f"Task {handled.id} finished with status: SUCCESS",
        ]
        wait_until(lambda: all(line in worker.output for line in lines), timeout_seconds=TIMEOUT)
        positions = [worker.output.index(line) for line in lines]
        assert positions == sorted(positions)
        # Ignore results you don't want: get() gives None at once; ignore_result=False stores it
        assert guide.mytask.delay().get(timeout=TIMEOUT) is None
        assert guide.mytask_2.apply_async((1, 2), ignore_result=True).get(timeout=TIMEOUT) is None
        assert guide.mytask_2.apply_async((1, 2), ignore_result=False).get(timeout=TIMEOUT) == 3
        wait_until(lambda: json.dumps(["mytask"]) in [raw.decode() for raw in redis.lrange("guide:notes", 0, -1)], timeout_seconds=TIMEOUT)
        # Avoid launching synchronous subtasks: get() inside a task is refused, unless allowed
        with pytest.raises(RuntimeError, match=r"Never call result\.get"):
            guide.update_page_info.delay("example.com").get(timeout=TIMEOUT)
        assert guide.update_page_info_2.delay("example.com").get(timeout=TIMEOUT) is None
        stored = ["page", "example.com", "<HTML>EXAMPLE.COM</HTML>"]
        wait_until(lambda: json.dumps(stored) in [raw.decode() for raw in redis.lrange("guide:notes", 0, -1)], timeout_seconds=TIMEOUT)
    dead_classes = [json.loads(raw)["class"] for raw in redis.zrange("dead", 0, -1)]
    assert dead_classes.count(guide.render_scene.name) == 3  # two rejected, one refused retry
