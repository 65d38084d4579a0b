"""Redis with a password, Redis over TLS (``rediss://``), and the eviction-policy warning.

Given a password-protected server, a worker and a producer configured with its URL run jobs, a
wrong password is a clear RedisUnavailable, and the password never shows in the banner or logs.
Given a TLS-only server (a throwaway CA and certificate made with openssl), a worker started
with a ``rediss://`` URL that verifies the certificate runs jobs. Given a server whose
``maxmemory-policy`` may evict keys, the worker warns at start.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

from jobsapp import RedisUnavailable
from tests.redis_server import RedisServer, free_port
from tests.testapp.jobs import RAN_KEY, Record
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.slow

PASSWORD = "s3cret-Redis-pw"


@pytest.fixture
def engine_on(settings):
    from jobsapp import connection

    def point(url: str) -> None:
        settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": url, "REDIS_SOCKET_TIMEOUT_SECONDS": 2.0}
        connection.reset()

    yield point
    connection.reset()


@pytest.fixture
def password_redis() -> Iterator[RedisServer]:
    server = RedisServer(password=PASSWORD).start()
    yield server
    server.stop()


def test_redis_with_a_password(password_redis, engine_on):
    engine_on(password_redis.url)
    Record.perform_async("with-password")
    with WorkerProcess(["-c", "2"], redis_url=password_redis.url) as worker:
        wait_until(lambda: password_redis.client().llen(RAN_KEY) == 1, message="the job ran")
    assert PASSWORD not in worker.output
    assert "redis://***@127.0.0.1" in worker.output
    # a wrong password is the documented error, and does not echo the password either
    engine_on(password_redis.url.replace(PASSWORD, "wrong-password"))
    with pytest.raises(RedisUnavailable) as raised:
        Record.perform_async("refused")
    assert "wrong-password" not in str(raised.value) and PASSWORD not in str(raised.value)


def make_certificates(directory: Path) -> dict[str, Path]:
    """A throwaway CA and server certificate with the extensions Python 3.13's strict X.509
    verification requires (without them the handshake fails and the test would only skip)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
            "-subj", "/CN=jobsapp test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-addext", "subjectKeyIdentifier=hash")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (directory / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid,issuer\n"
        "subjectKeyIdentifier=hash\n"
    )
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.crt",
            "-days", "1", "-extfile", "ext.cnf")  # fmt: skip
    return {name: directory / f"{name}" for name in ("ca.crt", "server.crt", "server.key")}


def answers(url: str) -> bool:
    try:
        return bool(redis_lib.Redis.from_url(url, socket_timeout=1).ping())
    except (redis_lib.RedisError, OSError):
        return False


@pytest.fixture
def tls_redis(tmp_path) -> Iterator[str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a throwaway certificate")
    files = make_certificates(tmp_path)
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--tls-cert-file", str(files["server.crt"]), "--tls-key-file", str(files["server.key"]),
         "--tls-ca-cert-file", str(files["ca.crt"]), "--tls-auth-clients", "no", "--dir", str(tmp_path),
         "--logfile", str(tmp_path / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={files['ca.crt']}&ssl_cert_reqs=required"
    try:
        try:
            wait_until(lambda: answers(url), timeout_seconds=5)
        except AssertionError:
            log = (tmp_path / "redis.log").read_text() if (tmp_path / "redis.log").exists() else ""
            pytest.skip(f"this redis-server does not serve TLS: {log[-300:]}")
        yield url
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("fetch", ["reliable", "basic"])  # basic: each thread's own BRPOP connection is TLS too
def test_redis_over_tls(tls_redis, engine_on, fetch):
    engine_on(tls_redis)
    Record.perform_async("over-tls")
    client = redis_lib.Redis.from_url(tls_redis)
    with WorkerProcess(["-c", "2", "--fetch", fetch], redis_url=tls_redis):
        wait_until(lambda: client.llen(RAN_KEY) == 1, message="the job ran over TLS")
    # and the plain-text port does not exist: nothing went in the clear
    with pytest.raises(redis_lib.ConnectionError):
        redis_lib.Redis.from_url(tls_redis.replace("rediss://", "redis://").split("?")[0], socket_timeout=1).ping()


def test_worker_warns_when_redis_may_evict_jobs(redis_server, redis):
    redis.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with WorkerProcess(["-c", "1"], redis_url=redis_server.url) as worker:
            wait_until(lambda: "maxmemory-policy is 'allkeys-lru'" in worker.output, message="the warning")
    finally:
        redis.config_set("maxmemory-policy", "noeviction")
    assert "Set it to 'noeviction'" in worker.output
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url) as quiet_worker:
        pass
    assert "maxmemory-policy" not in quiet_worker.output
