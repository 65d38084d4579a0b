"""The Quickstart's first command, ``bin/demo``, works end to end (as ``bin/demo --once``).

Given this checkout's .venv, when ``bin/demo --once`` runs with the project's own settings, then
the demo task's jobs all settle through a real ``runworkers`` and everything it started is gone
afterwards: with ``$REDIS_URL`` it uses that Redis without flushing it, without it it starts and
stops a throwaway redis-server of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis as redis_lib

pytestmark = pytest.mark.slow

ROOT_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo_env(tmp_path) -> dict[str, str]:
    if Path(sys.prefix).resolve() != (ROOT_DIR / ".venv").resolve():
        pytest.skip("bin/demo uses this checkout's .venv: run the tests with it (bin/test)")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "JOBSAPP_", "PYTEST"))}
    env.pop("REDIS_URL", None)
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'demo.sqlite3'}"
    env["TMPDIR"] = str(tmp_path)
    return env


def run_demo(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(ROOT_DIR / "bin" / "demo"), "--once"],
        cwd=ROOT_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"bin/demo --once failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


def test_demo_with_redis_url_runs_the_demo_and_leaves_that_redis_alone(demo_env, redis_server, redis):
    # Given a Redis of the user's, holding a key of theirs
    redis.set("users:own:key", "keep me")
    demo_env["REDIS_URL"] = redis_server.url
    # When the demo runs against it
    result = run_demo(demo_env)
    # Then the demo task settled completely through the workers
    assert re.search(r"^Done: .*: (\d+)/\1 settled \(100%\)", result.stdout, re.MULTILINE), result.stdout
    # And nothing was flushed, no worker is left registered, no job is left queued
    assert redis.get("users:own:key") == b"keep me"
    assert redis.smembers("processes") == set()
    assert [key for key in redis.scan_iter("queue:*") if redis.llen(key)] == []
    assert "throwaway" not in result.stderr


def test_demo_without_redis_url_starts_and_stops_its_own_redis(demo_env, tmp_path):
    result = run_demo(demo_env)
    assert re.search(r"^Done: .*: (\d+)/\1 settled \(100%\)", result.stdout, re.MULTILINE), result.stdout
    # It printed no page URL and no login: with --once no web server runs to answer them
    assert "http://" not in result.stdout and "log in" not in result.stdout, result.stdout
    assert "no web server runs" in result.stdout
    port = int(re.search(r"throwaway redis-server on 127\.0\.0\.1:(\d+)", result.stderr).group(1))
    # Its redis-server is stopped and its temporary directory removed
    with pytest.raises(redis_lib.ConnectionError):
        redis_lib.Redis(port=port, socket_connect_timeout=1).ping()
    assert list(tmp_path.glob("jobsapp-demo.*")) == []
