"""Scenario 14: a retained job from another client asks for ``"retain": 1e300`` seconds, which
Redis's EXPIRE refuses.

Given 300 retained jobs and, among them, one pushed by hand (as another client would) with
``retain: 1e300``, When ``runworkers -c 10`` drains them, Then every record is finished and has a
TTL (the hostile one kept a year at most), none is left ``queued`` or ``running``: the hostile
TTL is clamped by the writer and by ``result_write.lua``, so the batch of changes it rides in is
written whole.
"""

from __future__ import annotations

import json

import pytest

from jobsapp import options, results
from jobsapp.payload import new_jid, now
from tests.testapp.tasks import Add
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.slow

JOBS = 300


def test_a_hostile_retain_is_clamped_and_every_record_finishes(redis_server, redis, measure):
    # Given 300 retained jobs, one of them another client's with retain = 1e300
    jids = Add.perform_bulk([[index, 1] for index in range(JOBS - 1)])
    hostile = new_jid()
    item = {"class": Add.wire_name(), "args": [1, 1], "queue": "default", "jid": hostile, "retain": 1e300}
    redis.lpush("queue:default", json.dumps({**item, "created_at": now(), "enqueued_at": now()}))
    jids.append(hostile)
    # When a worker drains them
    with WorkerProcess(["-c", "10"], redis_url=redis_server.url):
        wait_until(
            lambda: all(getattr(results.get(jid), "ready", False) for jid in jids),
            timeout_seconds=60,
            message="every record finished",
        )
    # Then every record succeeded and has a TTL; the hostile one lives a year at most
    records = {jid: results.get(jid) for jid in jids}
    stuck = [jid for jid, record in records.items() if record is None or record.status != "succeeded"]
    ttls = {jid: redis.ttl(f"jobsapp:result:{jid}") for jid in jids}
    measure("14 hostile retain", jobs=JOBS, stuck=len(stuck), without_ttl=sum(1 for ttl in ttls.values() if ttl < 0))
    assert stuck == []
    assert all(ttl > 0 for ttl in ttls.values())
    assert 0 < ttls[hostile] <= options.RETAIN_MAX_SECONDS
    assert records[hostile].value == 2
