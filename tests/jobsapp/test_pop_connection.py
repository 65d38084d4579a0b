"""Basic fetch's own BRPOP connection: one send and one read per job on a blocking socket whose
wait the kernel bounds, and a reply parser for what BRPOP answers."""

from __future__ import annotations

import socket
import struct

import pytest
import redis as redis_lib

from jobsapp.worker.pop_connection import PopConnection, _Incomplete, pack_command, parse_pop_reply

JOB = b'{"class":"X","args":[1],"queue":"a","jid":"0123456789abcdef01234567"}'


def pop_client(url: str, *, socket_timeout_seconds: float = 10.0) -> redis_lib.Redis:
    return redis_lib.Redis.from_url(url, socket_timeout=socket_timeout_seconds)


@pytest.fixture
def url(redis_server) -> str:
    return redis_server.url


def test_a_command_is_packed_as_redis_reads_it(redis, url):
    # Given a BRPOP packed once, with a non-ASCII key
    command = pack_command("BRPOP", "queue:a", "queue:é", "2.0")
    assert command == b"*4\r\n$5\r\nBRPOP\r\n$7\r\nqueue:a\r\n$8\r\nqueue:\xc3\xa9\r\n$3\r\n2.0\r\n"
    # When Redis reads it, Then it pops from the second list
    redis.lpush("queue:é", JOB)
    connection = PopConnection(pop_client(url))
    try:
        assert connection.brpop(command) == [b"queue:\xc3\xa9", JOB]
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        (b"*-1\r\n", None),  # RESP2: timed out, or unblocked
        (b"_\r\n", None),  # RESP3's null
        (b"*2\r\n$7\r\nqueue:a\r\n$4\r\n{\r\n}\r\n", [b"queue:a", b"{\r\n}"]),  # CRLF inside the job is data
    ],
)
def test_every_shape_of_a_brpop_reply_is_parsed_whole(reply, parsed):
    assert parse_pop_reply(reply) == (parsed, len(reply))
    # and any prefix of it asks for more bytes
    for end in range(len(reply)):
        with pytest.raises(_Incomplete):
            parse_pop_reply(reply[:end])


def test_error_replies_raise_redis_py_exceptions():
    # READONLY after a failover is redis-py's ReadOnlyError (the caller drops the connection)
    with pytest.raises(redis_lib.exceptions.ReadOnlyError):
        parse_pop_reply(b"-READONLY You can't write against a read only replica.\r\n")
    with pytest.raises(redis_lib.ResponseError, match="WRONGTYPE"):
        parse_pop_reply(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n")
    # and a reply of another shape means the connection is out of step
    for garbled in (b"+OK\r\n", b"*2\r\n:7\r\n", b"*2\r\n$x\r\nqueue:a\r\n"):
        with pytest.raises(redis_lib.ConnectionError):
            parse_pop_reply(garbled)


def test_a_job_larger_than_one_read_comes_whole_and_the_next_reply_is_its_own(redis, url):
    # Given a job of 300 KB (several reads) and a small one behind it
    big = b'{"class":"X","args":["' + b"x" * 300_000 + b'"]}'
    redis.lpush("queue:a", big, JOB)
    connection = PopConnection(pop_client(url))
    command = pack_command("BRPOP", "queue:a", "1.0")
    try:
        # Then each BRPOP returns its job, byte for byte
        assert connection.brpop(command) == [b"queue:a", big]
        assert connection.brpop(command) == [b"queue:a", JOB]
        # And an empty queue times out as None
        assert connection.brpop(pack_command("BRPOP", "queue:a", "0.05")) is None
    finally:
        connection.close()


def test_the_socket_blocks_without_a_python_timeout_and_the_kernel_bounds_the_wait(url):
    # Given a client whose socket timeout is 0.3 s
    connection = PopConnection(pop_client(url, socket_timeout_seconds=0.3))
    try:
        # Then the socket has no Python-level timeout (no poll before each send and read)...
        assert connection.lean and connection.socket.gettimeout() is None
        # ...and the kernel's receive timeout is the connection's
        seconds, microseconds = struct.unpack("ll", connection.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16))
        assert (seconds, microseconds) == (0, 300_000)
        # When Redis does not answer within it (a BRPOP that blocks longer), Then it is a timeout
        with pytest.raises(redis_lib.TimeoutError):
            connection.brpop(pack_command("BRPOP", "queue:a", "5"))
    finally:
        connection.close()


def test_an_error_reply_is_raised(redis, url):
    # Given a queue key holding a string
    redis.set("queue:a", "not a list")
    connection = PopConnection(pop_client(url))
    try:
        with pytest.raises(redis_lib.ResponseError, match="WRONGTYPE"):
            connection.brpop(pack_command("BRPOP", "queue:a", "1.0"))
    finally:
        connection.close()


def test_a_connection_closed_by_redis_is_a_connection_error(redis, url):
    # Given a pop connection, When Redis kills it
    connection = PopConnection(pop_client(url))
    try:
        redis.client_kill_filter(_id=connection.id)
        # Then its next BRPOP fails as a connection error (nothing was popped)
        redis.lpush("queue:a", JOB)
        with pytest.raises(redis_lib.ConnectionError):
            connection.brpop(pack_command("BRPOP", "queue:a", "1.0"))
        assert redis.llen("queue:a") == 1
    finally:
        connection.close()
