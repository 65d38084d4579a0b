"""Celery-style tasks that exercise the task API (update_state, base= handlers, time limits,
Ignore, Reject, task loggers, stamps) for tests/jobsapp/test_celery_task_api.py and
test_celery_stamping.py. Each writes what it saw to the test's Redis (``celery-sample:*`` keys) or
returns it, so the test can read it from another process."""

import json
import time

from jobsapp.celery import Task, shared_task
from jobsapp.celery.canvas import StampingVisitor
from jobsapp.celery.exceptions import Ignore, Reject, SoftTimeLimitExceeded
from jobsapp.celery.utils.log import get_task_logger
from jobsapp.connection import get_redis

logger = get_task_logger(__name__)
HOOKS = "celery-sample:hooks"


def _record(*fields):
    get_redis().rpush(HOOKS, json.dumps(fields))


class RecordingTask(Task):
    """A base class with every handler, each recording its arguments."""

    connections_made = 0

    @property
    def connection(self):
        # cached per process, as Celery's DatabaseTask example: made once, then reused
        if getattr(self, "_connection", None) is None:
            type(self).connections_made += 1
            self._connection = f"connection-{type(self).connections_made}"
        return self._connection

    def before_start(self, task_id, args, kwargs):
        _record("before_start", task_id, list(args), kwargs)

    def on_success(self, retval, task_id, args, kwargs):
        _record("on_success", retval, task_id, list(args), kwargs)

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        _record("on_failure", repr(exc), task_id, list(args), kwargs, type(einfo.exception).__name__, "Traceback" in einfo.traceback)

    def on_retry(self, exc, task_id, args, kwargs, einfo):
        _record("on_retry", repr(exc), task_id, list(args), kwargs)

    def after_return(self, status, retval, task_id, args, kwargs, einfo):
        _record("after_return", status, retval if status == "SUCCESS" else repr(retval), task_id, list(args), kwargs, einfo)


@shared_task(base=RecordingTask, bind=True)
def hooked_add(self, left, right):
    return [left + right, self.connection]


@shared_task(base=RecordingTask)
def hooked_fails(message):
    raise ValueError(message)


@shared_task(base=RecordingTask, bind=True, autoretry_for=(KeyError,), max_retries=1, default_retry_delay=0)
def hooked_retries_once(self, key):
    if self.request.retries == 0:
        raise KeyError(key)
    return self.request.retries


@shared_task(bind=True)
def reports_progress(self, total):
    """Reports PROGRESS after each step, waits for the test to release it, then returns."""
    for current in range(1, total + 1):
        self.update_state(state="PROGRESS", meta={"current": current, "total": total})
    deadline = time.monotonic() + 30
    while not get_redis().exists("celery-sample:release") and time.monotonic() < deadline:
        time.sleep(0.02)
    return total


def _wait_for_release(started_key):
    get_redis().rpush(started_key, 1)
    deadline = time.monotonic() + 30
    while not get_redis().exists("celery-sample:release") and time.monotonic() < deadline:
        time.sleep(0.02)


@shared_task
def waits_untracked():
    """Says it started, then waits for the test to release it (Celery's default: PENDING while it runs)."""
    _wait_for_release("celery-sample:untracked-started")


@shared_task(track_started=True)
def waits_tracked():
    """As waits_untracked, with track_started: STARTED while it runs."""
    _wait_for_release("celery-sample:tracked-started")


@shared_task(bind=True)
def stores_and_ignores(self, timeline):
    """The tasks guide's get_tweets: stores its result itself, then raises Ignore."""
    if not self.request.called_directly:
        self.update_state(state="SUCCESS", meta=timeline)
    raise Ignore()


@shared_task
def ignores():
    raise Ignore()


@shared_task
def rejects(reason):
    raise Reject(reason, requeue=False)


@shared_task(bind=True)
def requeues(self):
    """The tasks guide's requeue example: rejected once, run again."""
    if not self.request.delivery_info["redelivered"]:
        raise Reject("no reason", requeue=True)
    return "received two times"


@shared_task(soft_time_limit=0.5)
def cleans_up_at_soft_limit():
    try:
        while True:
            time.sleep(0.01)
    except SoftTimeLimitExceeded:
        return "cleaned up"


@shared_task(soft_time_limit=0.5)
def ignores_soft_limit():
    while True:
        time.sleep(0.01)


@shared_task(time_limit=0.5)
def runs_past_time_limit():
    while True:
        time.sleep(0.01)


@shared_task(bind=True)
def logs(self, message):
    logger.info("logged %s", message)
    return self.request.id


@shared_task(bind=True, use_task_event=True)
def tracked_progress(self, total):
    """A tracked task reporting its progress with update_state."""
    for current in range(1, total + 1):
        self.update_state(state="PROGRESS", meta={"current": current, "total": total})
    return total


# --- stamping (tests/jobsapp/test_celery_stamping.py) ------------------------------------


@shared_task(bind=True)
def reports_stamps(self):
    """What the worker's request says of the task's stamps."""
    return {"stamps": self.request.stamps, "stamped_headers": sorted(self.request.stamped_headers)}


@shared_task(bind=True, max_retries=1)
def reports_stamps_after_a_retry(self):
    """Retried once; then what the retried run's request says of its stamps."""
    if not self.request.retries:
        raise self.retry(countdown=0)
    return {"retries": self.request.retries, "stamps": self.request.stamps}


class StampsOnReplace(StampingVisitor):
    """Stamps every task of a replacement with ``replaced: yes``."""

    def on_signature(self, sig, **headers):
        return {"replaced": "yes"}


class StampingOnReplace(Task):
    """Celery's ``on_replace`` hook, stamping the replacement before it is pushed."""

    def on_replace(self, sig):
        sig.stamp(StampsOnReplace())
        return super().on_replace(sig)


@shared_task(bind=True, base=StampingOnReplace)
def replaces_itself_with_reporter(self):
    return self.replace(reports_stamps.si())
