"""A Redis client whose plain commands take a short path: the engine's clients and ``get_redis()``,
the client jobs use.

Why: a worker is bound by its GIL, and redis-py 8's ``execute_command`` spends about 40 µs of
Python per command above the socket (observability recorders, an event dispatch, a retry closure,
argument-deprecation wrappers) and makes a ``poll`` system call on every pool checkout to check
that the connection holds no unread reply. With ten threads sharing one GIL each extra system call
can also mean a hand-off between threads. A job that makes one Redis call paid more for the client
than for the engine: ten threads calling ``INCR`` in one process ran about 8,000 calls/s through
redis-py's path and about 14,000 through this one (``bench.profile_drain`` has the worker numbers).

What is the same: commands, replies and their parsing (``Redis.parse_response`` and the response
callbacks), pipelines, Lua scripts, pub/sub, transactions, the pool's size limit, fork safety,
Sentinel's master tracking (a connection to an old master is dropped when returned), and the
retry policy: a command that fails with a connection error or a timeout is retried by the
connection's ``Retry``, as redis-py does.

What is different:
- the pool checks a checked-out connection for unread data only when it was not last used by a
  command of this path that read its whole reply. Such a command marks its connection clean
  after reading the reply, and checking out clears the mark, so a connection last used by
  anything else (a pipeline, pub/sub) is checked as redis-py checks it. A command of this path
  interrupted between its send and the end of its read (an exception raised into its thread,
  as a job's ``JobTimeout`` is) closes its connection: its reply can never reach another
  command, where redis-py's check can miss a reply still in flight;
- a fork is noticed through ``os.register_at_fork`` instead of a ``getpid`` system call per
  checkout and return;
- redis-py's per-command observability (its OpenTelemetry recorders) and the pool's
  connection-released event are not emitted for these clients. The event serves streaming
  credential providers and maintenance notifications (RESP3), which these clients do not use:
  pools with a credential provider, client-side caching or maintenance notifications keep
  redis-py's own path.
"""

from __future__ import annotations

import os
from typing import Any

import redis
import redis.client
import redis.sentinel
from redis.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ResponseError, WatchError

#: The attribute a command of the short path sets on a connection whose reply it read whole.
CLEAN_MARK = "_jobsapp_clean"

#: Incremented in a forked child: a pool made before the fork resets itself at its next use.
_fork_generation = 0


def _forked() -> None:
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_forked)


class LeanPoolMixin(ConnectionPool):
    """Checkout and return without a system call when nothing calls for one (see the module)."""

    _lean_generation = -1

    def _lean_ready(self) -> bool:
        """Whether this pool can take the short path (else: redis-py's own methods)."""
        ready = self.__dict__.get("_lean_ready_value")
        if ready is None:
            ready = (
                getattr(self, "cache", None) is None
                and not self.connection_kwargs.get("credential_provider")
                and not _maintenance_notifications(self)
            )
            self.__dict__["_lean_ready_value"] = ready
        return ready

    def _lean_checkpid(self) -> None:
        if self._lean_generation != _fork_generation:
            self._checkpid()  # a fork since: resets the pool in the child (redis-py's own check)
            self._lean_generation = _fork_generation

    def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        if not self._lean_ready():
            return super().get_connection()
        self._lean_checkpid()
        with self._lock:
            try:
                connection = self._available_connections.pop()
            except IndexError:
                connection = self.make_connection()
            self._in_use_connections.add(connection)
        try:
            clean = connection.__dict__.pop(CLEAN_MARK, False)
            if connection._sock is None:
                connection.connect()
            elif not clean:
                # as redis-py does: a connection must not hold a reply someone else should have read
                try:
                    if connection.can_read():
                        raise redis.ConnectionError("Connection has data")
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    connection.disconnect()
                    connection.connect()
                    if connection.can_read():
                        raise redis.ConnectionError("Connection not ready") from None
        except BaseException:
            self.release(connection)
            raise
        return connection

    def release(self, connection: Any) -> None:
        if not self._lean_ready():
            super().release(connection)
            return
        self._lean_checkpid()
        with self._lock:
            try:
                self._in_use_connections.remove(connection)
            except KeyError:  # not ours (made before a fork, or another pool's)
                return
            if self.owns_connection(connection):  # Sentinel: still connected to the master
                if connection.should_reconnect():
                    connection.disconnect()
                self._available_connections.append(connection)
                return
            connection.disconnect()
            if connection.pid == self.pid:
                self._created_connections -= 1


def _maintenance_notifications(pool: ConnectionPool) -> bool:
    """Whether the pool's connections may receive maintenance notifications: pushes, so RESP3
    only (redis-py's default config says "auto", which is inert on RESP2)."""
    if pool.connection_kwargs.get("protocol") not in (3, "3"):
        return False
    enabled = getattr(pool, "maint_notifications_enabled", None)
    return bool(enabled()) if callable(enabled) else False


class LeanConnectionPool(LeanPoolMixin, ConnectionPool):
    pass


class LeanSentinelConnectionPool(LeanPoolMixin, redis.sentinel.SentinelConnectionPool):
    pass


class LeanPipeline(redis.client.Pipeline):
    """A pipeline (or MULTI/EXEC transaction) that leaves its connection marked clean when it read
    every reply, and closes it when it was interrupted before that (see the module)."""

    def _execute_transaction(self, connection: Any, commands: Any, raise_on_error: Any) -> Any:
        return self._lean_execute(super()._execute_transaction, connection, commands, raise_on_error)

    def _execute_pipeline(self, connection: Any, commands: Any, raise_on_error: Any) -> Any:
        return self._lean_execute(super()._execute_pipeline, connection, commands, raise_on_error)

    @staticmethod
    def _lean_execute(execute: Any, connection: Any, commands: Any, raise_on_error: Any) -> Any:
        # WatchError: EXEC answered nil, read whole
        return _marked(connection, (ResponseError, WatchError), execute, connection, commands, raise_on_error)


class LeanRedis(redis.Redis):
    """``redis.Redis`` on a lean pool: a plain command is one checkout, one send, one read."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        pool = self.connection_pool
        if self.connection is not None or not isinstance(pool, LeanPoolMixin) or not pool._lean_ready():
            return super().execute_command(*args, **options)
        name = args[0]
        if isinstance(name, str) and name.startswith("HIMPORT"):  # needs per-connection state: redis-py's path
            return super().execute_command(*args, **options)
        connection = pool.get_connection()
        try:
            return connection.retry.call_with_retry(
                lambda: self._lean_call(connection, name, args, options),
                lambda _error: connection.disconnect(),
            )
        finally:
            pool.release(connection)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pool = self.connection_pool
        if not isinstance(pool, LeanPoolMixin) or not pool._lean_ready():
            return super().pipeline(transaction, shard_hint)
        return LeanPipeline(pool, self.response_callbacks, transaction, shard_hint)

    def execute_commands(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Send ``commands`` in one write and read their replies in order: what a pipeline without
        MULTI returns with ``raise_on_error=False`` (an error reply in its command's place), without
        building a pipeline object (~9 us less CPU for a push's two commands). Off the short path,
        a pipeline does it."""
        pool = self.connection_pool
        if self.connection is not None or not isinstance(pool, LeanPoolMixin) or not pool._lean_ready():
            pipe = self.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return list(pipe.execute(raise_on_error=False))
        connection = pool.get_connection()
        try:
            return list(
                connection.retry.call_with_retry(
                    lambda: _marked(connection, (), self._send_all_and_read, connection, commands),
                    lambda _error: connection.disconnect(),
                )
            )
        finally:
            pool.release(connection)

    def _send_all_and_read(self, connection: AbstractConnection, commands: tuple[tuple[Any, ...], ...]) -> list[Any]:
        connection.send_packed_command(connection.pack_commands(commands))
        replies: list[Any] = []
        for command in commands:
            try:
                replies.append(self.parse_response(connection, command[0]))
            except ResponseError as error:  # read whole: the next reply is still read
                replies.append(error)
        return replies

    def _lean_call(self, connection: AbstractConnection, name: Any, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        return _marked(connection, (ResponseError,), self._send_and_read, connection, name, args, options)

    def _send_and_read(self, connection: AbstractConnection, name: Any, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        connection.send_command(*args, **options)
        return self.parse_response(connection, name, **options)


def _marked(connection: Any, read_whole: tuple[type[BaseException], ...], call: Any, *args: Any) -> Any:
    """``call(*args)``, which sends on ``connection`` and reads the replies; then the connection is
    marked clean, also when it raised one of ``read_whole`` (errors raised after every reply was
    read). Anything else raised between the send and the end of the read (an exception raised
    into the thread, a timeout) closes it: a reply may still come, and must reach no one."""
    try:
        result = call(*args)
    except read_whole:
        connection.__dict__[CLEAN_MARK] = True
        raise
    except BaseException:
        connection.disconnect()
        raise
    connection.__dict__[CLEAN_MARK] = True
    return result


def from_url(url: str, **options: Any) -> LeanRedis:
    """``redis.Redis.from_url`` on a lean pool (the client owns the pool, as there)."""
    client = LeanRedis(connection_pool=LeanConnectionPool.from_url(url, **options))
    client.auto_close_connection_pool = True
    return client
