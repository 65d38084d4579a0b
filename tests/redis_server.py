"""A throwaway redis-server for tests: own port, own directory, nothing saved to disk.

Tests never touch a Redis they did not start. Fault tests use ``kill``, ``restart`` and
``pause`` to make Redis go away under a running worker.

``$JOBSAPP_TEST_REDIS_SERVER`` names another server binary to start instead of ``redis-server``
(.ci/run runs the core of the suite on Valkey's ``valkey-server`` that way).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    def __init__(self, *, port: int | None = None, password: str | None = None, extra_args: Sequence[str] = ()) -> None:
        executable = shutil.which(os.environ.get("JOBSAPP_TEST_REDIS_SERVER") or "redis-server")
        if executable is None:
            raise RuntimeError("redis-server is not on PATH: install Redis >= 6.2 (Debian: apt-get install redis-server)")
        self.executable = executable
        self.port = port or free_port()
        self.password = password
        self.extra_args = list(extra_args)  # more redis-server options, e.g. ["--replicaof", host, port]
        self.directory = Path(tempfile.mkdtemp(prefix="jobsapp-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        command = [
            self.executable,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.directory / "redis.log"),
            "--maxmemory-policy",
            "noeviction",
        ]
        if self.password:
            command += ["--requirepass", self.password]
        command += self.extra_args
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        client = self.client()
        while True:
            try:
                client.ping()
                return self
            except (redis.ConnectionError, redis.ResponseError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    log = (self.directory / "redis.log").read_text() if (self.directory / "redis.log").exists() else ""
                    raise RuntimeError(f"redis-server did not start on port {self.port}: {log[-2000:]}") from None
                time.sleep(0.02)

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, **kwargs)  # type: ignore[arg-type]

    def kill(self) -> None:
        """SIGKILL the server: every connection drops, all data is gone."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def pause(self, seconds: float) -> None:
        """Freeze the server (SIGSTOP) for ``seconds``: connections stay open, nothing answers."""
        if self.process:
            os.kill(self.process.pid, signal.SIGSTOP)
            time.sleep(seconds)
            os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
