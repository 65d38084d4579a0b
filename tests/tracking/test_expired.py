"""An expired tracked job (``expires_in``, dropped unrun by the engine) ends as a final error."""

from __future__ import annotations

import json

import pytest

from jobsapp.connection import get_redis
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from tests.tracking.jobs import PlainTracked
from tracking.models import Event, Task

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_expired_tracked_job_is_recorded_as_an_error_that_never_ran(redis):
    # Given a tracked job whose expiry passed while it waited in its queue
    jid = PlainTracked.set(expires_in=5).perform_async(1, scale=2)
    item = json.loads(redis.rpop("queue:reports"))
    item["expires_at"] -= 3600
    raw = json.dumps(item).encode()
    redis.rpush("jobsapp:inflight:expired-test", raw)
    # When a worker takes it
    Processor(RetryPolicy(get_redis(), "jobsapp:inflight:expired-test")).process(UnitOfWork(raw, "reports"))
    # Then its event is a final error saying it expired, never working, and its task is finished
    row = Event.objects.get(job_id=jid)
    assert (row.status, row.is_final, row.attempts) == ("error", True, 0)
    assert "expired" in row.messages[-1]["message"]
    assert [entry["status"] for entry in row.messages] == ["error"]
    assert Task.objects.get(pk=row.task_id).status == "finished"
