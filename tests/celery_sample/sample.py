"""Code written against Celery's API, type-checked twice by tests/jobsapp/test_celery.py: as is,
with celery-types' stubs, and with its imports changed to jobsapp.celery. Not imported at run time."""

from __future__ import annotations

from typing import Any

from celery import Celery, chain, chord, group, shared_task
from celery.result import AsyncResult

app = Celery("proj")
app.autodiscover_tasks()


@app.task
def double(value: int) -> int:
    return value * 2


@shared_task
def add(left: int, right: int) -> int:
    return left + right


@shared_task(bind=True, max_retries=5, default_retry_delay=10, autoretry_for=(TimeoutError,), retry_backoff=True)
def fetch(self: Any, url: str) -> str:
    if self.request.retries > 3:
        raise self.retry(countdown=5, max_retries=10)
    return url


@shared_task(name="reports.total", queue="reports", ignore_result=False)
def total(values: list[int]) -> int:
    return sum(values)


def calls() -> None:
    result: AsyncResult[int] = add.delay(1, 2)
    value: int = result.get(timeout=10)
    later = add.apply_async((1, 2), countdown=30, queue="critical", task_id="abc", headers={"h": "v"})
    print(value, later.id, later.state, later.status, later.ready(), later.successful(), later.failed(), later.result)
    later.forget()
    fetch.delay("https://example.com")
    sum_of_all = chord(group(add.s(index, index) for index in range(3)), total.s()).apply_async()
    print(sum_of_all.get(timeout=10))
    pipeline = chain(add.s(1, 2), add.s(3), add.si(4, 5)).apply_async()
    print(pipeline.get(timeout=10))
    print(group(add.s(1, 1), add.s(2, 2)).apply_async().get(timeout=10))
    print(AsyncResult("some-id").state)
    print(double.delay(2).get(timeout=10) + 1)
    sent = app.send_task("reports.total", args=([1, 2],), queue="reports", countdown=5)
    print(sent.get(timeout=10), app.AsyncResult(sent.id).ready())
