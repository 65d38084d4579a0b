"""Where the engine's Redis comes from: a URL, or a django-redis cache alias shared with the cache."""

from __future__ import annotations

import json

from jobsapp import connection
from tests.testapp.jobs import RAN_KEY, Record
from tests.workers import WorkerProcess, wait_until


def test_cache_alias_shares_the_cache_pool(redis_server, redis, settings):
    # Given the engine configured by a django-redis cache alias (and a URL it must ignore)
    settings.CACHES = {
        "jobs": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_server.url, "OPTIONS": {}},
    }
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_CACHE_ALIAS": "jobs", "REDIS_URL": "redis://127.0.0.1:1/0"}
    connection.reset()
    from django_redis import get_redis_connection

    # When a job is pushed
    Record.perform_async("through the cache pool")
    # Then it went through the cache's own connection pool, to the cache's server
    assert connection.get_redis().connection_pool is get_redis_connection("jobs").connection_pool
    assert json.loads(redis.rpop("queue:default"))["args"] == ["through the cache pool"]
    assert connection.describe() == "cache alias 'jobs'"
    blocking = connection.new_redis(blocking_timeout_seconds=2)
    assert blocking.connection_pool is not connection.get_redis().connection_pool
    assert blocking.ping()


def test_worker_configured_by_cache_alias(redis_server, redis):
    Record.perform_async("worker via alias")
    overrides = {"REDIS_CACHE_ALIAS": "jobs-redis", "REDIS_URL": "redis://127.0.0.1:1/0"}
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url, env={"JOBSAPP_TEST_OVERRIDES": json.dumps(overrides)}):
        wait_until(lambda: redis.llen(RAN_KEY) == 1, message="the job ran through the cache alias")


def test_password_in_url_is_hidden_in_descriptions(settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": "redis://:s3cret@db.example:6379/2"}
    assert "s3cret" not in connection.describe()
