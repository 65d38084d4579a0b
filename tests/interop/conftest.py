"""Fixtures for the interop tests against real Ruby Sidekiq 6.4 (Debian's ruby-sidekiq).

Every test module here sets ``pytestmark = pytest.mark.interop``; every test skips, with the
reason, when ``ruby`` or the sidekiq gem is missing. Ruby talks to the same throwaway
redis-server as the test (``$REDIS_URL``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.redis_server import RedisServer

RUBY_DIR = Path(__file__).resolve().parent / "ruby"
WORKER_SETTINGS = {"DJANGO_SETTINGS_MODULE": "tests.interop.settings"}


@functools.cache
def ruby_missing_reason() -> str | None:
    if shutil.which("ruby") is None:
        return "ruby is not installed (Debian: apt-get install ruby-sidekiq)"
    if shutil.which("sidekiq") is None:
        return "the sidekiq command is not on PATH (Debian: apt-get install ruby-sidekiq)"
    probe = subprocess.run(["ruby", "-e", 'require "sidekiq"; print Sidekiq::VERSION'], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"the sidekiq gem does not load: {probe.stderr.strip()[-300:]}"
    if not probe.stdout.startswith("6."):
        return f"these tests target Sidekiq 6.4, found {probe.stdout.strip()}"
    return None


def skip_without_ruby() -> None:
    """Skip when Ruby Sidekiq is missing; fail instead where it is required (.ci/run sets
    JOBSAPP_REQUIRE_INTEROP=1, so CI cannot pass by silently skipping interop)."""
    reason = ruby_missing_reason()
    if reason and os.environ.get("JOBSAPP_REQUIRE_INTEROP") == "1":
        pytest.fail(f"interop tests are required here (JOBSAPP_REQUIRE_INTEROP=1): {reason}")
    if reason:
        pytest.skip(reason)


@pytest.fixture(autouse=True)
def _needs_ruby_sidekiq() -> None:
    skip_without_ruby()


def ruby_env(redis_url: str) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "RUBYOPT": "-W0"}


def run_ruby(script: str, *args: str, redis_url: str) -> str:
    """Run tests/interop/ruby/<script> with Ruby; its stdout, or AssertionError with its stderr."""
    result = subprocess.run(
        ["ruby", str(RUBY_DIR / script), *args],
        capture_output=True,
        text=True,
        env=ruby_env(redis_url),
        timeout=60,
    )
    assert result.returncode == 0, f"ruby {script} {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


class RubyView:
    """What Ruby Sidekiq's API (Stats, RetrySet, DeadSet, ProcessSet, Workers) reads from Redis."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    def push(self, item: dict[str, Any]) -> str:
        """Sidekiq::Client.push(item); the jid."""
        return run_ruby("push.rb", json.dumps(item), redis_url=self.redis_url).strip()

    def inspect(self) -> dict[str, Any]:
        return json.loads(run_ruby("inspect.rb", redis_url=self.redis_url))

    def signal(self, command: str, identity: str) -> dict[str, Any]:
        """Sidekiq::Process#quiet! (``"quiet"``: TSTP) or #stop! (``"stop"``: TERM) on ``identity``,
        through its ``<identity>-signals`` list; then what Ruby sees, as ``inspect``."""
        return json.loads(run_ruby("inspect.rb", command, identity, redis_url=self.redis_url))


@pytest.fixture
def ruby(redis_server: RedisServer) -> RubyView:
    return RubyView(redis_server.url)


class RubySidekiqProcess:
    """A real ``sidekiq -r worker.rb`` process (Ruby), registered in ``processes`` when started."""

    def __init__(self, redis_server: RedisServer, *, queues: tuple[str, ...] = ("default",), concurrency: int = 2) -> None:
        self.redis_server = redis_server
        self.log = tempfile.NamedTemporaryFile(prefix="ruby-sidekiq-", suffix=".log", delete=False)
        command = ["sidekiq", "-r", str(RUBY_DIR / "worker.rb"), "-c", str(concurrency), "-t", "3"]
        for queue in queues:
            command += ["-q", queue]
        self.process = subprocess.Popen(
            command,
            cwd=RUBY_DIR,
            env=ruby_env(redis_server.url),
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def wait_registered(self, timeout_seconds: float = 20.0) -> None:
        client = self.redis_server.client(decode_responses=True)
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            for identity in client.smembers("processes"):
                info = client.hget(identity, "info")
                if info and json.loads(info).get("pid") == self.process.pid:
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"Ruby sidekiq did not register in Redis; output:\n{self.output[-4000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def ruby_sidekiq(redis_server: RedisServer) -> Iterator[RubySidekiqProcess]:
    """One Ruby Sidekiq worker (queue default, 2 threads) for the whole test module."""
    skip_without_ruby()
    process = RubySidekiqProcess(redis_server)
    process.wait_registered()
    yield process
    process.stop()
