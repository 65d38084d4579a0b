"""One processor thread's own Redis connection for basic fetch's ``BRPOP`` (``fetch``).

Basic fetch is Sidekiq's: each processor thread blocks in a ``BRPOP`` of its own for the one job
it runs next, one round trip per job. In a GIL-bound worker of ten threads a round trip costs
mostly its system calls: each one releases the GIL, and can hand it to another thread and back
(context switches, futex calls). Through redis-py's connection a ``BRPOP`` was four of them
(``poll`` before the send, the send, ``poll`` before the read, the read: Python polls before
every send and receive on a socket with a timeout) plus the client's Python layers (packing
each time, health checks). Here it is one ``send`` of bytes packed once per queue order and one
blocking ``recv``, parsed here (a BRPOP reply is null, an error, or a key and a job).

The socket is blocking, without the Python-level timeout that costs the ``poll`` calls; the
kernel's ``SO_RCVTIMEO``/``SO_SNDTIMEO`` bound the wait instead, set to the connection's socket
timeout (longer than the block, ``connection.new_redis``): a dead server is still noticed, as
before. A TLS connection keeps Python's timeout (its TLS layer waits with ``poll`` on a blocking
socket, past a kernel timeout).

redis-py still opens the connection (address, Sentinel's master, TLS, AUTH, SELECT, RESP
version) and closes it. Any error on it (a broken socket, a timeout, an error reply such as
READONLY after a failover, an exception raised into the thread mid-reply) closes it for good:
whatever it held is gone, and the thread's next fetch opens a new one. A job BRPOP had popped
when its reply was lost is lost: basic fetch's documented risk.
"""

from __future__ import annotations

import socket
import struct

import redis
from redis._parsers.base import BaseParser

#: The most bytes one ``recv`` asks for.
RECV_BYTES = 65536


def pack_command(*args: str | bytes) -> bytes:
    """A command in RESP (an array of bulk strings), as Redis reads it."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode("utf-8") if isinstance(arg, str) else arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Incomplete(Exception):
    """The buffer does not hold a whole reply yet."""


def parse_pop_reply(buffer: bytes | bytearray) -> tuple[list[bytes] | None, int]:
    """A ``BRPOP`` reply at the start of ``buffer`` and how many bytes it took: ``[key, value]``,
    or None (timed out, or unblocked: RESP2's null array, RESP3's null). An error reply raises
    its redis-py exception; a reply of another shape raises ``redis.ConnectionError`` (the
    connection is out of step). Raises ``_Incomplete`` when more bytes are needed."""
    end = buffer.find(b"\r\n")
    if end < 0:
        raise _Incomplete
    header = bytes(buffer[:end])
    position = end + 2
    if header != b"*2":
        if header in (b"*-1", b"_"):
            return None, position
        if header[:1] == b"-":
            raise BaseParser.parse_error(header[1:].decode("utf-8", "replace"))
        raise redis.ConnectionError(f"unexpected reply to BRPOP: {header[:40]!r}")
    values: list[bytes] = []
    for _ in range(2):  # two bulk strings: $<length>\r\n<bytes>\r\n
        end = buffer.find(b"\r\n", position)
        if end < 0:
            raise _Incomplete
        if buffer[position : position + 1] != b"$":
            raise redis.ConnectionError(f"unexpected reply to BRPOP: {bytes(buffer[position:end])[:40]!r}")
        start = end + 2
        try:
            end = start + int(buffer[position + 1 : end])
        except ValueError:
            raise redis.ConnectionError(f"unexpected reply to BRPOP: {bytes(buffer[position:end])[:40]!r}") from None
        if len(buffer) < end + 2:
            raise _Incomplete
        values.append(bytes(buffer[start:end]))
        position = end + 2
    return values, position


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1_000_000))


class PopConnection:
    """One thread's connection, used only for ``BRPOP`` (and ``CLIENT ID`` once, so quiet can
    ``CLIENT UNBLOCK`` it). Not thread-safe: it belongs to the thread that made it."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client  # kept: a client collected as garbage closes its pool's connections
        self.connection = client.connection_pool.get_connection()
        try:
            self.connection.send_command("CLIENT", "ID")
            self.id = int(self.connection.read_response())
            self.socket = self._own_socket()
        except BaseException:
            self.close()
            raise
        self._buffer = bytearray()

    def _own_socket(self) -> socket.socket:
        sock: socket.socket | None = getattr(self.connection, "_sock", None)
        if sock is None:
            raise redis.ConnectionError("the BRPOP connection has no socket")
        # a plain socket: blocking, bounded by the kernel instead of Python's poll; TLS keeps its timeout
        self.lean = type(sock) is socket.socket
        if self.lean:
            timeout_seconds = sock.gettimeout()
            sock.settimeout(None)
            if timeout_seconds:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(timeout_seconds))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(timeout_seconds))
        return sock

    def close(self) -> None:
        """Close the socket (its reply, if any, is gone with it) and give the connection back."""
        self.connection.disconnect()
        self.client.connection_pool.release(self.connection)

    def brpop(self, command: bytes) -> list[bytes] | None:
        """Send one packed ``BRPOP`` and read its reply: ``[key, job]`` or None (see
        ``parse_pop_reply``). Raises redis-py's exceptions (``TimeoutError`` when Redis did not
        answer within the socket timeout, ``ConnectionError`` for a broken connection); after
        any exception the connection is unusable: close it."""
        try:
            self.socket.sendall(command)
            return self._read_reply()
        except (BlockingIOError, TimeoutError):  # SO_RCVTIMEO (or TLS's timeout) ran out
            raise redis.TimeoutError("Timeout reading from the BRPOP connection") from None
        except OSError as exc:
            raise redis.ConnectionError(f"Error on the BRPOP connection: {exc}") from exc

    def _read_reply(self) -> list[bytes] | None:
        buffer = self._buffer
        while True:
            chunk = self.socket.recv(RECV_BYTES)
            if not chunk:
                raise redis.ConnectionError("Redis closed the BRPOP connection")
            if buffer:
                buffer += chunk
                data: bytes | bytearray = buffer
            else:
                data = chunk
            try:
                reply, used = parse_pop_reply(data)
            except _Incomplete:
                if not buffer:
                    buffer += chunk
                continue
            if used != len(data):  # one command, one reply: anything more means out of step
                raise redis.ConnectionError("more bytes than one reply on the BRPOP connection")
            buffer.clear()
            return reply
