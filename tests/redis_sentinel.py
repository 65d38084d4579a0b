"""A throwaway Redis Sentinel deployment for tests: a master, its replicas and three Sentinels,
all real processes on loopback ports of their own, started and stopped by the test.

    cluster = SentinelCluster(password="pw", sentinel_password="spw").start()
    cluster.settings()          # the JOBSAPP keys that point the engine at it
    cluster.kill_master()       # SIGKILL: the Sentinels elect a replica within a few seconds
    cluster.wait_for_new_master(timeout_seconds=20)
    cluster.stop()

Failover is made fast (``down-after-milliseconds`` 1000, ``failover-timeout`` 3000) so a test
sees it in ~2-4 s; every server syncs replicas without a delay (``repl-diskless-sync-delay 0``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from tests.redis_server import RedisServer, free_port
from tests.workers import wait_until

SERVICE = "jobs"


class SentinelProcess:
    """``redis-server sentinel.conf --sentinel`` (the config file must be writable: Sentinel
    rewrites it with what it learns)."""

    def __init__(self, *, master_port: int, password: str | None, sentinel_password: str | None, quorum: int) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RuntimeError("redis-server is not on PATH: install Redis >= 6.2 (Debian: apt-get install redis-server)")
        self.executable = executable
        self.port = free_port()
        self.password = sentinel_password
        self.directory = Path(tempfile.mkdtemp(prefix="jobsapp-sentinel-"))
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            f"dir {self.directory}",
            f"logfile {self.directory / 'sentinel.log'}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} {quorum}",
            f"sentinel down-after-milliseconds {SERVICE} 1000",
            f"sentinel failover-timeout {SERVICE} 3000",
            f"sentinel parallel-syncs {SERVICE} 5",
        ]
        if password:
            lines.append(f"sentinel auth-pass {SERVICE} {password}")
        if sentinel_password:
            lines += [f"requirepass {sentinel_password}", f"sentinel sentinel-pass {sentinel_password}"]
        (self.directory / "sentinel.conf").write_text("\n".join(lines) + "\n")
        self.process: subprocess.Popen[bytes] | None = None

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=2, decode_responses=True)

    def start(self) -> SentinelProcess:
        self.process = subprocess.Popen(
            [self.executable, str(self.directory / "sentinel.conf"), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(self._answers, timeout_seconds=10, interval_seconds=0.02, message=f"sentinel on {self.port} answers")
        return self

    def _answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def master_state(self) -> dict[str, Any]:
        return dict(self.client().sentinel_master(SERVICE))

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


class SentinelCluster:
    def __init__(self, *, replicas: int = 2, sentinels: int = 3, password: str | None = None, sentinel_password: str | None = None) -> None:
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.password = password
        self.sentinel_password = sentinel_password
        self.servers: list[RedisServer] = []  # the master first, until a failover
        self.sentinels: list[SentinelProcess] = []
        self.master: RedisServer | None = None

    # --- lifecycle -----------------------------------------------------------------------

    def _server_args(self) -> list[str]:
        args = ["--repl-diskless-sync-delay", "0"]
        if self.password:
            args += ["--masterauth", self.password]
        return args

    def start(self) -> SentinelCluster:
        try:
            self.master = RedisServer(password=self.password, extra_args=self._server_args()).start()
            self.servers.append(self.master)
            for _ in range(self.replica_count):
                replica_args = [*self._server_args(), "--replicaof", "127.0.0.1", str(self.master.port)]
                self.servers.append(RedisServer(password=self.password, extra_args=replica_args).start())
            wait_until(
                lambda: self.connected_replicas(self.master) == self.replica_count,
                timeout_seconds=15,
                message="every replica synced with the master",
            )
            quorum = self.sentinel_count // 2 + 1
            for _ in range(self.sentinel_count):
                sentinel = SentinelProcess(
                    master_port=self.master.port, password=self.password, sentinel_password=self.sentinel_password, quorum=quorum
                )
                self.sentinels.append(sentinel.start())
            wait_until(self._sentinels_ready, timeout_seconds=20, interval_seconds=0.1, message="the Sentinels know all the servers")
        except BaseException:
            self.stop()
            raise
        return self

    def _sentinels_ready(self) -> bool:
        for sentinel in self.sentinels:
            state = sentinel.master_state()
            if int(state["num-slaves"]) < self.replica_count or int(state["num-other-sentinels"]) < self.sentinel_count - 1:
                return False
        return True

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.stop()

    # --- what tests use ------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """JOBSAPP keys pointing the engine at this deployment (through the Sentinels only)."""
        options = {"password": self.sentinel_password} if self.sentinel_password else {}
        auth = f":{self.password}@" if self.password else ""
        return {
            "SENTINELS": [["127.0.0.1", sentinel.port] for sentinel in self.sentinels],
            "SENTINEL_SERVICE": SERVICE,
            "SENTINEL_OPTIONS": options,
            "REDIS_URL": f"redis://{auth}{SERVICE}/0",  # host ignored with SENTINELS: db and password only
        }

    def connected_replicas(self, server: RedisServer | None) -> int:
        if server is None:
            return 0
        info = server.client(socket_timeout=2).info("replication")
        return sum(
            1 for key, value in info.items() if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
        )

    def kill_master(self) -> RedisServer:
        """SIGKILL the current master: everything it had not replicated yet is gone."""
        assert self.master is not None
        killed = self.master
        killed.kill()
        return killed

    def freeze_master(self) -> RedisServer:
        """SIGSTOP the current master (a partition: it keeps its connections and its data, and
        answers again, still believing it is the master, when thawed)."""
        assert self.master is not None and self.master.process is not None
        frozen = self.master
        os.kill(frozen.process.pid, signal.SIGSTOP)
        return frozen

    @staticmethod
    def thaw(server: RedisServer) -> None:
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGCONT)

    def wait_until_replica(self, server: RedisServer, *, timeout_seconds: float = 30.0) -> None:
        """Block until ``server`` (a thawed old master) has been turned into a replica by Sentinel."""

        def demoted() -> bool:
            try:
                return server.client(socket_timeout=1).info("replication").get("role") == "slave"
            except redis.RedisError:
                return False

        wait_until(demoted, timeout_seconds=timeout_seconds, interval_seconds=0.1, message="the old master became a replica")

    def wait_for_new_master(self, *, timeout_seconds: float = 30.0) -> RedisServer:
        """Block until every Sentinel names a live replica as master; that server."""
        assert self.master is not None
        old_port = self.master.port

        def promoted() -> RedisServer | None:
            ports = {self._reported_port(sentinel) for sentinel in self.sentinels}
            if len(ports) != 1 or old_port in ports or None in ports:
                return None
            port = ports.pop()
            server = next((server for server in self.servers if server.port == port), None)
            if server is None:
                return None
            try:
                role = server.client(socket_timeout=1).info("replication").get("role")
            except redis.RedisError:
                return None
            return server if role == "master" else None

        new_master = wait_until(promoted, timeout_seconds=timeout_seconds, interval_seconds=0.05, message="a replica was promoted")
        assert isinstance(new_master, RedisServer)
        self.master = new_master
        return new_master

    @staticmethod
    def _reported_port(sentinel: SentinelProcess) -> int | None:
        try:
            address = sentinel.client().sentinel_get_master_addr_by_name(SERVICE)
        except redis.RedisError:
            return None
        return int(address[1]) if address else None


def wait_seconds(condition: Any, *, timeout_seconds: float) -> float:
    """How long ``condition`` took to become true (AssertionError at the timeout)."""
    started = time.monotonic()
    wait_until(condition, timeout_seconds=timeout_seconds, interval_seconds=0.02)
    return time.monotonic() - started
