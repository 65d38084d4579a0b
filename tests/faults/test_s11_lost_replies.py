"""Scenario 11: replies lost to a socket timeout (issue 14).

Redis frozen (SIGSTOP) past the client's socket timeout runs the commands it had received when
it wakes, but their replies are lost: a fetch moved jobs into the live process's own in-flight
list without the process knowing (they ran only after a worker restart, 40 s+ or never), and an
ack applied twice counted ``stat:processed`` twice. Now the fetcher reconciles its in-flight list
once Redis answers again, and an ack batch is resent with its token.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.redis_server import RedisServer
from tests.testapp.jobs import Nap
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.slow

JOBS = 1500


def test_jobs_moved_by_a_fetch_whose_reply_was_lost_run_without_a_restart():
    server = RedisServer().start()
    try:
        redis = server.client()
        # Given a worker with a 1 s socket timeout busy on a long queue of 10 ms jobs
        redis.lpush("queue:default", *[json.dumps({"class": Nap.wire_name(), "args": [0.01], "jid": f"{n:024x}"}) for n in range(JOBS)])
        redis.sadd("queues", "default")
        overrides = {"REDIS_SOCKET_TIMEOUT_SECONDS": 1.0}
        with WorkerProcess(["-c", "4"], {"JOBSAPP_TEST_OVERRIDES": json.dumps(overrides)}, redis_url=server.url) as worker:
            wait_until(lambda: int(redis.get("stat:processed") or 0) >= 100, message="the worker is draining")
            # When Redis freezes for 4 s, twice, so fetches and acks time out and run on waking
            for _ in range(2):
                freezer = threading.Thread(target=server.pause, args=(4.0,))
                freezer.start()
                freezer.join()
                time.sleep(0.5)
            # Then every job runs, each counted once, and nothing waits in flight for a restart
            wait_until(
                lambda: (
                    redis.llen("queue:default") == 0
                    and not any(redis.llen(key) for key in redis.scan_iter(match="jobsapp:inflight:*"))
                    and int(redis.get("stat:processed") or 0) >= JOBS
                ),
                timeout_seconds=60,
                message="every job ran and nothing is left in flight",
            )
            time.sleep(1.5)  # the last ack batches
            output = worker.output
        assert int(redis.get("stat:processed")) == JOBS, output[-3000:]
        assert redis.zcard("retry") == 0 and redis.zcard("dead") == 0
    finally:
        server.stop()
