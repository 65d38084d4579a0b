"""Real worker processes for tests: ``python manage.py runworkers`` as a subprocess.

    with WorkerProcess(["-q", "default", "-c", "2"], redis_url=redis_server.url) as worker:
        Noop.perform_async()
        wait_until(lambda: redis.llen("queue:default") == 0, message="the worker drained the queue")
        worker.identity        # "hostname:pid:<12 hex>", as written to the ``processes`` SET
    # left the block: SIGTERM sent, exit awaited (RuntimeError with the output if it hung)

Starting waits until the process has registered itself: a new member of ``processes`` whose
``<identity>`` hash has ``info`` (one per forked process with ``-P N``). The subprocess gets
``REDIS_URL`` and unbuffered output; its stdout and stderr go to a temporary file, read with
``.output``. It runs in its own session, so leaving the block also reaps any child it forked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

import redis

ROOT_DIR = Path(__file__).resolve().parent.parent


def wait_until(
    condition: Callable[[], object], *, timeout_seconds: float = 10.0, interval_seconds: float = 0.05, message: str = ""
) -> object:
    """Poll ``condition`` until it returns something truthy (returned); AssertionError at the timeout."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_seconds:g} s waiting until {message or condition!r}")
        time.sleep(interval_seconds)


def _process_count(args: Sequence[str]) -> int:
    """How many worker identities ``-P/--processes N`` will register (1 without the flag)."""
    for index, arg in enumerate(args):
        if arg in ("-P", "--processes") and index + 1 < len(args):
            return int(args[index + 1])
        if arg.startswith("--processes="):
            return int(arg.split("=", 1)[1])
    return 1


class WorkerProcess:
    """``manage.py runworkers <args>`` against ``redis_url`` (default: ``$REDIS_URL``)."""

    def __init__(
        self,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        *,
        redis_url: str | None = None,
        start_timeout_seconds: float = 20.0,
        stop_timeout_seconds: float = 30.0,
    ) -> None:
        self.args = list(args)
        self.redis_url = redis_url or os.environ["REDIS_URL"]
        self.env = {**os.environ, "REDIS_URL": self.redis_url, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.start_timeout_seconds = start_timeout_seconds
        self.stop_timeout_seconds = stop_timeout_seconds
        if self.env.get("REDIS_CLUSTER") == "1":  # a worker in cluster mode (project/settings.py)
            from tests.redis_cluster import tagged_client_from_url

            self.redis = tagged_client_from_url(self.redis_url, decode_responses=True)
        else:
            self.redis = redis.Redis.from_url(self.redis_url, decode_responses=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.identities: list[str] = []
        self._log = tempfile.NamedTemporaryFile(prefix="jobsapp-worker-", suffix=".log", delete=False)
        self._final_output: str | None = None

    # --- what tests read -----------------------------------------------------------------

    @property
    def pid(self) -> int:
        assert self.process is not None, "the worker was not started"
        return self.process.pid

    @property
    def identity(self) -> str:
        """The identity of the process we started (or of its first child, with ``-P``)."""
        for identity in self.identities:
            if self.info(identity).get("pid") == self.pid:
                return identity
        return self.identities[0]

    def info(self, identity: str | None = None) -> dict:
        """The ``info`` JSON of a registered process hash ({} once it is gone)."""
        raw = self.redis.hget(identity or self.identity, "info")
        return json.loads(raw) if raw else {}

    @property
    def output(self) -> str:
        """Everything the process printed so far (stdout and stderr interleaved); kept after exit."""
        if self._final_output is not None:
            return self._final_output
        return Path(self._log.name).read_text(errors="replace")

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> WorkerProcess:
        before = set(self.redis.smembers("processes"))
        expected = _process_count(self.args)
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "runworkers", *self.args],
            cwd=ROOT_DIR,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout_seconds
        while True:
            new = sorted(set(self.redis.smembers("processes")) - before)
            self.identities = [identity for identity in new if self.redis.hexists(identity, "info")]
            if len(self.identities) >= expected:
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                reason = f"exited with {self.process.returncode}" if self.process.poll() is not None else "timed out"
                self._kill_group()
                self._close()
                raise RuntimeError(
                    f"runworkers {' '.join(self.args)} {reason} before registering "
                    f"{expected} process(es) in Redis; output:\n{self.output[-4000:]}"
                )
            time.sleep(0.05)

    def signal(self, signal_number: int) -> None:
        """Send a signal to the process we started (TSTP quiets, TERM stops, TTIN dumps threads)."""
        os.kill(self.pid, signal_number)

    def kill(self) -> None:
        """SIGKILL the process we started, and wait for it: no shutdown code runs."""
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait()
        self._close()

    def stop(self) -> int:
        """SIGTERM, wait up to ``stop_timeout_seconds``; the exit code. RuntimeError if it hung."""
        assert self.process is not None
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=self.stop_timeout_seconds)
        except subprocess.TimeoutExpired:
            self._kill_group()
            raise RuntimeError(
                f"runworkers did not exit within {self.stop_timeout_seconds:g} s of SIGTERM; output:\n{self.output[-4000:]}"
            ) from None
        self._kill_group()  # children a crashed supervisor left behind
        self._close()
        return code

    def _kill_group(self) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # the whole group is gone already
        self.process.wait()

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None) -> None:
        try:
            self.stop()
        except RuntimeError:
            if exc_type is None:
                raise
        finally:
            self._close()

    def _close(self) -> None:
        """Keep the output in memory, remove the log file, close the Redis client."""
        if self._final_output is None:
            self._final_output = self.output
            self._log.close()
            Path(self._log.name).unlink(missing_ok=True)
        self.redis.close()


#: Whether the running test is marked ``database`` (set by tests/conftest.py before its setup).
running_test_uses_database = False


def worker_database_url() -> str:
    """``DATABASE_URL`` for a worker subprocess that must use this test's database (skips when
    the test database is in memory, which no other process can open). The test must be marked
    ``database`` (its database fixtures mark it), so that .ci/run runs it on PostgreSQL too."""
    import pytest
    from django.db import connection

    if not running_test_uses_database:
        pytest.fail(
            "worker_database_url() in a test not marked database: request transactional_db, or mark it "
            "@pytest.mark.database, so that it also runs on PostgreSQL"
        )

    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        name = str(settings["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            pytest.skip("the test database is in memory: a worker subprocess cannot share it")
        return f"sqlite:///{name}"
    if connection.vendor == "postgresql":
        auth = settings["USER"] + (f":{settings['PASSWORD']}" if settings.get("PASSWORD") else "")
        return f"postgresql://{auth}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"
    pytest.skip(f"no worker database URL for {connection.vendor}")
