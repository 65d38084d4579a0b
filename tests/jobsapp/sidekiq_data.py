"""Builders that write Sidekiq 6.4-format data straight into Redis, as a Ruby process would.

Used by the api, dashboard, metrics, CLI and browser tests to put the installation into a known
state without running workers. Every write follows docs/redis-layout.md byte for byte: compact
JSON, float epoch seconds, compressed backtraces, heartbeat hashes with a 60 s TTL.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import time
from typing import Any

from jobsapp import keys
from jobsapp.api import encode_backtrace


def dump(item: dict[str, Any]) -> bytes:
    return json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def job(klass: str = "HardWorker", args: list | None = None, *, queue: str = "default", **extra: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "class": klass,
        "args": [1, 2] if args is None else args,
        "retry": True,
        "queue": queue,
        "jid": secrets.token_hex(12),
        "created_at": time.time() - 100,
    }
    item.update(extra)
    return item


def failed(
    item: dict[str, Any],
    *,
    error_class: str = "RuntimeError",
    message: str = "boom",
    count: int = 0,
    backtrace: list[str] | None = None,
) -> dict[str, Any]:
    now = time.time()
    item = dict(item)
    item.update(
        error_class=error_class,
        error_message=message,
        failed_at=now - 60,
        retry_count=count,
        error_backtrace=encode_backtrace(backtrace or ["app/jobs.py:10:in `perform'", "lib/worker.py:3"]),
    )
    if count:
        item["retried_at"] = now - 30
    return item


def enqueue(redis, item: dict[str, Any], *, enqueued_at: float | None = None) -> bytes:
    item = dict(item)
    item["enqueued_at"] = time.time() if enqueued_at is None else enqueued_at
    raw = dump(item)
    redis.sadd(keys.QUEUES, item["queue"])
    redis.lpush(keys.queue(item["queue"]), raw)
    return raw


def add_to_set(redis, set_name: str, item: dict[str, Any], score: float) -> bytes:
    raw = dump(item)
    redis.zadd(set_name, {raw: score})
    return raw


def identity(hostname: str = "web-1", pid: int = 4242) -> str:
    return f"{hostname}:{pid}:{secrets.token_hex(6)}"


def process(
    redis,
    *,
    name: str | None = None,
    busy: int = 0,
    quiet: bool = False,
    queues: list[str] | None = None,
    running: list[dict[str, Any]] | None = None,
    tag: str = "app",
    concurrency: int = 10,
    write_work: bool = True,
    beat: float | None = None,
) -> str:
    """A live process heartbeat; ``running`` jobs go to :workers (and :work unless write_work is False)."""
    name = name or identity()
    hostname, pid, _ = name.split(":")
    info = {
        "hostname": hostname,
        "started_at": time.time() - 3600,
        "pid": int(pid),
        "tag": tag,
        "concurrency": concurrency,
        "queues": queues or ["default"],
        "labels": ["blue"],
        "identity": name,
    }
    pipe = redis.pipeline(transaction=True)
    pipe.sadd(keys.PROCESSES, name)
    pipe.hset(
        keys.process(name),
        mapping={
            "info": json.dumps(info),
            "busy": busy if running is None else len(running),
            "beat": time.time() if beat is None else beat,
            "quiet": "true" if quiet else "false",
            "rss": 51234,
            "rtt_us": 120,
            "concurrency": concurrency,
        },
    )
    pipe.expire(keys.process(name), 60)
    for index, item in enumerate(running or []):
        work = json.dumps({"queue": item["queue"], "payload": dump(item).decode(), "run_at": int(time.time()) - index})
        pipe.hset(keys.workers(name), f"tid{index}", work)
        if write_work:
            pipe.hset(keys.work(name), f"tid{index}", work)
    pipe.execute()
    return name


def daily(redis, day: dt.date, *, processed: int, failed: int) -> None:
    redis.set(keys.stat_processed_daily(day), processed)
    redis.set(keys.stat_failed_daily(day), failed)


def populate(redis) -> dict[str, Any]:
    """Data in every state, for the dashboard and browser tests; returns the notable jids."""
    now = time.time()
    today = dt.datetime.now(dt.UTC).date()
    for offset in range(30):
        daily(redis, today - dt.timedelta(days=offset), processed=1000 + 37 * offset, failed=10 + offset % 7)
    redis.set(keys.STAT_PROCESSED, 123456)
    redis.set(keys.STAT_FAILED, 789)
    queued = [enqueue(redis, job("HardWorker", [index, {"password": "hunter2"}]), enqueued_at=now - 30 + index) for index in range(30)]
    enqueue(redis, job("ImportRow", [7], queue="imports"), enqueued_at=now - 5)
    redis.sadd(keys.PAUSED, "imports")
    scheduled = job("ReportJob", ["weekly"], queue="reports")
    add_to_set(redis, keys.SCHEDULE, scheduled, now + 3600)
    retry = failed(job("FlakyJob", [42, {"token": "abc123"}]), error_class="Net::ReadTimeout", message="timed out", count=2)
    add_to_set(redis, keys.RETRY, retry, now + 120)
    dead = failed(job("BrokenJob", ["x"]), error_class="ZeroDivisionError", message="divided by 0", count=25)
    add_to_set(redis, keys.DEAD, dead, now - 600)
    running = job("LongJob", ["import.csv"], queue="default")
    name = process(redis, running=[running], queues=["default", "imports"])
    return {
        "queued": queued,
        "scheduled": scheduled["jid"],
        "retry": retry["jid"],
        "dead": dead["jid"],
        "running": running["jid"],
        "identity": name,
    }
