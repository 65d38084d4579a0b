"""Celery code written here, annotated, in the forms Celery's documentation uses (every decorator
form of the tasks guide, the Django example's ``debug_task``, calls and results; the bodies are
ours), type-checked twice by test_typing.py: with
these imports against celery-types' stubs, and with ``celery`` changed to ``jobsapp.celery``.
jobsapp's errors must be a subset of celery-types'. Never imported at run time."""

from __future__ import annotations

import datetime
from typing import Any

from celery import Celery, Task, chain, chord, group, shared_task, states
from celery.exceptions import Ignore, Reject, SoftTimeLimitExceeded, TimeLimitExceeded
from celery.result import AsyncResult, EagerResult
from celery.schedules import crontab
from celery.utils.log import get_task_logger

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.update(result_expires=3600)
logger = get_task_logger(__name__)


@app.task(bind=True, ignore_result=True)
def debug_task(self: Any) -> None:
    print(f"Request: {self.request!r}")


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task()
def mul(x: int, y: int) -> int:
    return x * y


@app.task(name="sum-of-two-numbers")
def xsum(numbers: list[int]) -> int:
    return sum(numbers)


@app.task(serializer="json", queue="critical", max_retries=5, default_retry_delay=30 * 60)
def create_user(username: str, password: str) -> None:
    logger.info("creating %s", username)


@app.task(bind=True)
def dump_context(self: Task[Any, Any], x: int, y: int) -> None:
    print(f"Executing task id {self.request.id}, args: {self.request.args!r} kwargs: {self.request.kwargs!r}")


@app.task(bind=True, default_retry_delay=30 * 60)
def retried(self: Task[Any, Any], x: int, y: int) -> int:
    try:
        return x // y
    except ZeroDivisionError as exc:
        raise self.retry(exc=exc, countdown=60)


@app.task(autoretry_for=(ConnectionError,), retry_kwargs={"max_retries": 5}, retry_backoff=True, retry_jitter=False)
def refresh_timeline(user: str) -> list[str]:
    return [user]


@shared_task
def shared_add(x: int, y: int) -> int:
    return x + y


@shared_task()
def shared_mul(x: int, y: int) -> int:
    return x * y


@shared_task(bind=True, autoretry_for=(Exception,), retry_kwargs={"max_retries": 2, "countdown": 10 * 60})
def error_task(self: Any) -> None:
    raise Exception("Test error")


@shared_task(ignore_result=True, soft_time_limit=10, time_limit=20)
def limited() -> str:
    try:
        return "done"
    except SoftTimeLimitExceeded:
        return "cleaned up"


class DatabaseTask(Task[Any, Any]):
    _db: object | None = None

    @property
    def db(self) -> object:
        if self._db is None:
            self._db = object()
        return self._db


class MyTask(Task[Any, Any]):
    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        print(f"{task_id!r} failed: {exc!r}")

    def on_success(self, retval: Any, task_id: str, args: Any, kwargs: Any) -> None:
        print(f"Task {task_id} succeeded with result: {retval}")


@app.task(base=DatabaseTask, bind=True)
def process_rows(self: DatabaseTask) -> object:
    return self.db


@app.task(base=MyTask)
def my_task(x: int, y: int) -> int:
    return x + y


@shared_task(base=MyTask, bind=True)
def shared_with_base(self: MyTask, x: int) -> int:
    return x


@app.task(bind=True)
def upload_files(self: Task[Any, Any], filenames: list[str]) -> None:
    for i, _file in enumerate(filenames):
        if not self.request.called_directly:
            self.update_state(state="PROGRESS", meta={"current": i, "total": len(filenames)})


@app.task(bind=True)
def get_tweets(self: Task[Any, Any], user: str) -> None:
    self.update_state(state=states.SUCCESS, meta=[user])
    raise Ignore()


@app.task(bind=True, acks_late=True)
def render_scene(self: Task[Any, Any], path: str) -> None:
    if not path:
        raise Reject("no path", requeue=False)
    raise TimeLimitExceeded()


app.conf.beat_schedule = {
    "add-every-30-seconds": {"task": "tasks.add", "schedule": 30.0, "args": (16, 16)},
    "add-every-monday-morning": {"task": "tasks.add", "schedule": crontab(hour=7, minute=30, day_of_week=1), "args": (16, 16)},
}
app.conf.timezone = "UTC"


def calls() -> None:
    result: AsyncResult[int] = add.delay(4, 4)
    value: int = result.get(timeout=10)
    print(value + 1, result.id, result.state, result.status, result.ready(), result.successful(), result.failed(), result.info)
    add.apply_async((2, 2), queue="lopri", countdown=10)
    add.apply_async((2, 2), eta=datetime.datetime.now(datetime.UTC), expires=60, ignore_result=True)
    mul.delay(2, 3)
    xsum.delay([1, 2, 3])
    create_user.delay("george", "password")
    dump_context.delay(2, 3)
    retried.delay(1, 0)
    refresh_timeline.delay("bob")
    shared_add.delay(1, 2).get(timeout=1)
    shared_mul.apply_async((1, 2))
    error_task.delay()
    limited.apply_async(soft_time_limit=5, time_limit=10)
    debug_task.delay()
    process_rows.delay()
    my_task.delay(2, 3)
    shared_with_base.delay(1)
    upload_files.delay(["a"])
    get_tweets.delay("bob")
    render_scene.delay("scene")
    eager: EagerResult[int] = add.apply((2, 2))
    print(eager.get(), eager.state)
    print(group(add.s(i, i) for i in range(10))().get(timeout=10))
    print(chain(add.s(4, 4) | mul.s(8))().get(timeout=10))
    print(chord((add.s(i, i) for i in range(10)), xsum.s())().get(timeout=10))
    print(app.AsyncResult("this-id-does-not-exist").state)
    print(app.send_task("tasks.add", args=(1, 2)).get(timeout=10))
