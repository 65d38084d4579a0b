"""The engine's Redis client (``jobsapp.lean_redis``): redis-py's behaviour on a shorter path."""

from __future__ import annotations

import os
import threading

import pytest
import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from jobsapp import connection, lean_redis


@pytest.fixture
def client() -> lean_redis.LeanRedis:
    built = connection.get_redis()
    assert isinstance(built, lean_redis.LeanRedis)
    assert isinstance(built.connection_pool, lean_redis.LeanConnectionPool)
    assert built.connection_pool._lean_ready()  # the short path is taken, not redis-py's
    return built


def test_replies_are_parsed_as_redis_py_parses_them(client):
    assert client.set("name", b"\xff raw") is True
    assert client.get("name") == b"\xff raw"  # bytes, never decoded
    assert client.incr("counter") == 1
    assert client.hset("hash", mapping={"a": "1", "b": "2"}) == 2
    assert client.hgetall("hash") == {b"a": b"1", b"b": b"2"}
    assert client.mget(["name", "missing"]) == [b"\xff raw", None]
    assert client.zadd("zset", {"m": 1.5}) == 1
    assert client.zrange("zset", 0, -1, withscores=True) == [(b"m", 1.5)]
    assert client.exists("name", "missing") == 1
    assert client.ping() is True


def test_an_error_reply_raises_and_the_connection_stays_usable(client):
    client.set("text", "x")
    with pytest.raises(redis_lib.ResponseError, match="WRONGTYPE"):
        client.lpush("text", "y")
    assert client.get("text") == b"x"
    assert len(client.connection_pool._available_connections) == 1  # not dropped: the reply was read whole


def test_pipelines_transactions_scripts_and_pubsub(client):
    with client.pipeline() as pipe:
        assert pipe.incr("a").incr("a").get("a").execute() == [1, 2, b"2"]
    script = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert script(keys=["b"], args=[5]) == 5
    assert script(keys=["b"], args=[5]) == 10
    pubsub = client.pubsub()
    pubsub.subscribe("channel")
    assert pubsub.get_message(timeout=1)["type"] == "subscribe"
    client.publish("channel", "hello")
    assert pubsub.get_message(timeout=1)["data"] == b"hello"
    pubsub.close()
    assert client.get("a") == b"2"


def test_a_pipeline_that_read_every_reply_leaves_its_connection_clean(client, monkeypatch):
    with client.pipeline() as pipe:
        pipe.set("key", "value").incr("counter").execute()
    (connection,) = client.connection_pool._available_connections
    assert connection.__dict__[lean_redis.CLEAN_MARK] is True  # the next checkout polls nothing
    with pytest.raises(redis_lib.ResponseError), client.pipeline(transaction=False) as pipe:
        pipe.incr("key").get("key").execute()  # an error reply: every reply read all the same
    assert connection.__dict__[lean_redis.CLEAN_MARK] is True
    # an interrupted pipeline closes its connection: the next command reads its own reply
    with monkeypatch.context() as patch:
        patch.setattr(redis_lib.client.Pipeline, "parse_response", lambda *args, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt), client.pipeline() as pipe:
            pipe.echo("never read").execute()
    assert connection._sock is None
    assert client.get("counter") == b"1"


def test_commands_sent_in_one_write_answer_as_a_pipeline_without_multi(client):
    # Given a key of another type, so that one of the commands gets an error reply
    client.set("text", "x")
    # When commands are sent together
    replies = client.execute_commands(("SADD", "queues", "default"), ("LPUSH", "text", "y"), ("ZADD", "zset", 1.5, "m"))
    # Then each reply stands in its command's place, the error reply as an exception, parsed as
    # a pipeline parses them, and every reply was read: the connection is marked clean
    assert replies[0] == 1 and replies[2] == 1
    assert isinstance(replies[1], redis_lib.ResponseError) and "WRONGTYPE" in str(replies[1])
    with client.pipeline(transaction=False) as pipe:
        expected = pipe.sadd("queues", "other").lpush("text", "y").execute(raise_on_error=False)
    assert expected[0] == 1 and type(expected[1]) is type(replies[1])
    (connection,) = client.connection_pool._available_connections
    assert connection.__dict__[lean_redis.CLEAN_MARK] is True
    assert client.zrange("zset", 0, -1, withscores=True) == [(b"m", 1.5)]


def test_commands_interrupted_before_their_replies_close_their_connection(client, monkeypatch):
    # Given commands whose thread is interrupted after the send, before the replies are read
    client.set("key", "value")
    with monkeypatch.context() as patch:
        patch.setattr(client, "parse_response", lambda *args, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            client.execute_commands(("ECHO", "never read"), ("ECHO", "nor this"))
    # Then the connection was closed, and the next command reads its own reply
    assert client.connection_pool._available_connections[0]._sock is None
    assert client.get("key") == b"value"


def test_a_connection_returned_with_an_unread_reply_is_not_reused_as_it_is(client):
    # Given a connection returned to the pool holding a reply nobody read (a pipeline or a command
    # interrupted between its send and its read: an exception raised into the thread, JobTimeout)
    pool = client.connection_pool
    client.set("key", "value")  # the pool's one connection, marked clean by the short path
    interrupted = pool.get_connection()
    interrupted.send_command("ECHO", "stale reply")
    assert interrupted.can_read(timeout=5)  # the reply has arrived, unread
    pool.release(interrupted)
    # When the next command checks that connection out
    # Then it reads its own reply, not the stale one
    assert client.get("key") == b"value"
    assert client.get("key") == b"value"


def test_an_interrupted_command_does_not_leave_its_reply_for_the_next_one(client, monkeypatch):
    # Given a command whose thread is interrupted after its send, before its read
    client.set("key", "value")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # what an exception raised into a thread does

    with monkeypatch.context() as patch:
        patch.setattr(client, "parse_response", interrupted)
        with pytest.raises(KeyboardInterrupt):
            client.echo("never read")
    # Then the next command gets its own reply: that connection was closed
    assert client.connection_pool._available_connections[0]._sock is None
    assert client.get("key") == b"value"


def test_a_killed_connection_fails_once_then_a_new_one_is_made(client, redis):
    # Given the client's connection killed by the server
    client.set("key", "value")
    own_id = client.client_id()
    redis.client_kill_filter(_id=own_id)
    # When commands are sent, Then the first fails as redis-py's (no retries configured), and the
    # next runs on a new connection
    with pytest.raises(redis_lib.ConnectionError):
        client.get("key")
    assert client.get("key") == b"value"
    assert client.client_id() != own_id


def test_the_retry_policy_is_the_connection_s(redis_server, redis):
    # Given a client whose connections retry connection errors (redis-py's Retry)
    retrying = lean_redis.from_url(redis_server.url, retry=Retry(NoBackoff(), 2))
    retrying.set("key", "value")
    redis.client_kill_filter(_id=retrying.client_id())
    # When its connection is killed, Then the command is retried on a new one and succeeds
    assert retrying.get("key") == b"value"


def test_threads_share_the_pool(client):
    def work() -> None:
        for _ in range(200):
            client.incr("shared")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert client.get("shared") == b"1600"
    assert len(client.connection_pool._in_use_connections) == 0


def test_the_pool_size_limit_holds(redis_server):
    small = lean_redis.from_url(redis_server.url, max_connections=1)
    held = small.connection_pool.get_connection()
    with pytest.raises(redis_lib.exceptions.MaxConnectionsError):
        small.ping()
    small.connection_pool.release(held)
    assert small.ping() is True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # the child only sends one command
def test_a_forked_child_never_uses_its_parent_s_connection(client):
    parent_id = client.client_id()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the same client object, a new connection
        try:
            os.write(writer, str(client.client_id()).encode())
        finally:
            os._exit(0)
    os.close(writer)
    child_id = int(os.read(reader, 100))
    os.waitpid(pid, 0)
    os.close(reader)
    assert child_id != parent_id
    assert client.client_id() == parent_id  # the parent's connection is untouched


def test_a_credential_provider_keeps_redis_py_s_path(redis_server):
    # streaming credential providers re-authenticate on redis-py's connection-released event
    provider = redis_lib.UsernamePasswordCredentialProvider()
    with_provider = lean_redis.from_url(redis_server.url, credential_provider=provider)
    assert not with_provider.connection_pool._lean_ready()
    with_provider.set("key", "value")
    assert with_provider.get("key") == b"value"
