"""The Redis connections the engine uses: from a URL, from Redis Sentinel, or from a django-redis
cache alias; one per shard (``jobsapp.shards``; without ``JOBSAPP["SHARDS"]`` there is one shard,
``"default"``, configured by the top-level settings).

One client (and so one connection pool) per shard per process: redis-py clients are thread-safe
and check connections out of the pool per command. Clients are built lazily and dropped when the
process forks, so a child of ``runworkers -P`` never shares a socket with its parent.

With Sentinel (``SENTINELS`` + ``SENTINEL_SERVICE``, or a django-redis alias whose client is
``SentinelClient``) every new connection asks the Sentinels where the master is, and a connection
to a master that became a replica (READONLY) is dropped. So after a failover the next command on
each connection fails once (the callers' ordinary Redis-error path: a push raises
RedisUnavailable, a worker backs off and retries) and the one after it reaches the new master.
Blocking connections (``new_redis``) get a pool of their own with the same Sentinel lookup.

With ``REDIS_CLUSTER`` the client is redis-py's ``RedisCluster``, started from the one node
``REDIS_URL`` names (it learns the rest from ``CLUSTER SLOTS``, and follows ``MOVED``/``ASK`` and
failovers itself). It has one pool per node, and it answers the same commands as a plain client
for the keys the engine uses: every key of a command or script carries one hash tag
(``jobsapp.keys``), so nothing is cross-slot. This module tells ``jobsapp.keys`` whether the
current context's shard is a cluster (``keys.use_cluster_mode_source``).

Responses are bytes, never decoded: a job's raw JSON must go back to Redis exactly as it came
(``LREM`` compares bytes), and a malformed, non-UTF-8 payload must still be readable so it can be
moved to the dead set instead of wedging the fetcher.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import redis
import redis.cluster
import redis.sentinel
from django.conf import settings
from redis.backoff import NoBackoff
from redis.connection import SSLConnection, parse_url
from redis.retry import Retry

from . import keys, lean_redis, shards
from .errors import RedisUnavailable
from .redaction import redact_url

#: Exceptions that mean "Redis is not answering right now" rather than "this command is wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ClusterDownError,
    ConnectionError,
    OSError,
)


#: Any failure of a Redis call: no answer, or an error reply a worker must survive and retry
#: (READONLY after a failover, MISCONF on a full disk, OOM, BUSY, LOADING).
REDIS_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, redis.RedisError)

#: Error replies that mean "Redis is up but refuses writes right now": at ``maxmemory`` with
#: ``noeviction`` (OOM), a replica after a failover (READONLY), a failed RDB save with
#: ``stop-writes-on-bgsave-error`` (MISCONF). A producer reports them as RedisUnavailable.
REFUSED_WRITE_PREFIXES = ("OOM", "READONLY", "MISCONF")


def refuses_writes(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing writes for now (see REFUSED_WRITE_PREFIXES); redis-py
    prefixes an error inside a pipeline with "Command # N (...) of pipeline caused error: "."""
    if isinstance(exc, (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)):
        return True
    if not isinstance(exc, redis.ResponseError):
        return False
    message = str(exc)
    message = message.split("caused error: ", 1)[-1]
    return message.startswith(REFUSED_WRITE_PREFIXES)


def refusal_reason(exc: BaseException) -> str:
    """The error reply as Redis wrote it, with the "OOM" or "READONLY" code redis-py strips."""
    message = str(exc).split("caused error: ", 1)[-1]
    for kind, code in ((redis.exceptions.OutOfMemoryError, "OOM"), (redis.exceptions.ReadOnlyError, "READONLY")):
        if isinstance(exc, kind) and not message.startswith(code):
            return f"{code} {message}"
    return message


@dataclass(frozen=True)
class _Target:
    """Where one shard's Redis is, as the settings say now (compared to rebuild on change)."""

    shard: str
    url: str
    cache_alias: str | None
    sentinels: tuple[tuple[str, int], ...]
    sentinel_service: str | None
    sentinel_options: dict[str, Any] = field(hash=False)
    socket_timeout_seconds: float
    cluster: bool = False


def _target(shard: str) -> _Target:
    sentinels = shards.setting(shard, "SENTINELS") or ()
    return _Target(
        shard=shard,
        url=str(shards.setting(shard, "REDIS_URL") or ""),
        cache_alias=shards.setting(shard, "REDIS_CACHE_ALIAS"),
        sentinels=tuple((str(host), int(port)) for host, port in sentinels),
        sentinel_service=shards.setting(shard, "SENTINEL_SERVICE"),
        sentinel_options=dict(shards.setting(shard, "SENTINEL_OPTIONS") or {}),
        socket_timeout_seconds=float(shards.setting(shard, "REDIS_SOCKET_TIMEOUT_SECONDS")),
        cluster=bool(shards.setting(shard, "REDIS_CLUSTER")),
    )


_lock = threading.Lock()
#: shard name -> (the settings objects it was built from, its target, its client)
_clients: dict[str, tuple[tuple[object, ...], _Target, redis.Redis]] = {}


def _settings_seen() -> tuple[object, ...]:
    """What the targets are read from, cheaply (a push asks for its client every time): the
    JOBSAPP dict and the fallbacks of REDIS_URL. Compared by identity and equality, so replacing
    ``settings.JOBSAPP`` (override_settings, tests) is noticed; mutating it in place is not."""
    return (getattr(settings, "JOBSAPP", None), getattr(settings, "REDIS_URL", None), os.environ.get("REDIS_URL"))


def _same_settings(seen: tuple[object, ...], now: tuple[object, ...]) -> bool:
    return seen[0] is now[0] and seen[1:] == now[1:]


def _url_options(url: str) -> dict[str, Any]:
    """What a URL says besides host and port (database, credentials, TLS), as client options:
    with Sentinel the master's address comes from the Sentinels, the rest from REDIS_URL."""
    if not url:
        return {}
    options = parse_url(url)
    for key in ("host", "port", "path"):
        options.pop(key, None)
    connection_class = options.pop("connection_class", None)
    if connection_class is not None and issubclass(connection_class, SSLConnection):
        options["ssl"] = True  # SentinelConnectionPool picks its TLS connection class from this flag
    elif connection_class is not None:
        raise ValueError(f"REDIS_URL {describe_url(url)!r}: with SENTINELS use a redis:// or rediss:// URL")
    return options


def _sentinel_master(target: _Target, *, socket_timeout_seconds: float, pool_size: int | None) -> redis.Redis:
    if not target.sentinel_service:
        raise ValueError("JOBSAPP['SENTINELS'] is set but JOBSAPP['SENTINEL_SERVICE'] (the master's name in Sentinel) is not")
    # The Sentinels answer small queries: a dead one must not stall a reconnect for the whole
    # socket timeout, so their timeouts are short unless SENTINEL_OPTIONS says otherwise.
    sentinel_timeout = min(target.socket_timeout_seconds, 2.0)
    sentinel_options = {"socket_timeout": sentinel_timeout, "socket_connect_timeout": sentinel_timeout, **target.sentinel_options}
    manager = redis.sentinel.Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_options)
    return manager.master_for(
        target.sentinel_service,
        redis_class=lean_redis.LeanRedis,
        connection_pool_class=lean_redis.LeanSentinelConnectionPool,
        socket_timeout=socket_timeout_seconds,
        socket_connect_timeout=min(socket_timeout_seconds, 5.0),
        health_check_interval=30,
        max_connections=pool_size,
        decode_responses=False,
        **_url_options(target.url),
    )


class LazyCluster:
    """redis-py's RedisCluster, made on first use: making one reads the slot map from a node, and
    a cluster that does not answer yet must fail the first command (inside the callers' ordinary
    Redis-error path: a push raises RedisUnavailable, a worker waits), not the client's creation,
    as a plain client does. Every attribute is the cluster client's."""

    def __init__(self, build: Callable[[], redis.cluster.RedisCluster]) -> None:
        self._build = build
        self._client: redis.cluster.RedisCluster | None = None
        self._lock = threading.Lock()

    def cluster_client(self) -> redis.cluster.RedisCluster:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    try:
                        self._client = self._build()
                    except redis.exceptions.RedisClusterException as exc:  # no node answered: retried at the next use
                        raise redis.ConnectionError(str(exc)) from exc
                client = self._client
        return client

    def __getattr__(self, name: str) -> Any:
        try:
            client = self.cluster_client()
        except redis.ConnectionError as exc:
            # raised when called, as a plain client raises from its commands, not from reading them
            error = exc
            if name == "pipeline":  # queued commands cost nothing: the error comes with execute()
                return lambda *args, **kwargs: _UnreachablePipeline(error)

            def unreachable(*args: Any, **kwargs: Any) -> Any:
                raise error

            return unreachable
        return getattr(client, name)


class _UnreachablePipeline:
    """The pipeline of a cluster no node of which answered: it queues anything, and raises the
    connection error from ``execute``, where a plain client's pipeline would."""

    def __init__(self, error: redis.ConnectionError) -> None:
        self._error = error

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        raise self._error

    def __len__(self) -> int:
        return 0

    def __enter__(self) -> _UnreachablePipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


def _cluster_of(client: object) -> redis.cluster.RedisCluster | None:
    if isinstance(client, LazyCluster):
        return client.cluster_client()
    if isinstance(client, redis.cluster.RedisCluster):
        return client
    return None


def _cluster_client(target: _Target, *, socket_timeout_seconds: float, pool_size: int | None) -> redis.Redis:
    """redis-py's RedisCluster (made on first use), from the node REDIS_URL names. It is typed as
    the plain client the engine passes around: it takes the same commands, pipelines and scripts
    for single-slot keys."""
    if target.cache_alias:
        raise ValueError("JOBSAPP['REDIS_CLUSTER'] cannot use REDIS_CACHE_ALIAS: django-redis has no cluster client; give REDIS_URL")
    if target.sentinels:
        raise ValueError("JOBSAPP['REDIS_CLUSTER'] and JOBSAPP['SENTINELS'] exclude each other: a cluster fails over by itself")
    if not target.url:
        raise ValueError("JOBSAPP['REDIS_CLUSTER'] needs REDIS_URL naming a node of the cluster")
    options: dict[str, Any] = {}
    if pool_size is not None:
        options["max_connections"] = pool_size
    url = target.url

    def build() -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster.from_url(
            url,
            # no retries inside the client: a command whose reply was lost (a master frozen past
            # the timeout) would be sent again and its first effect hidden, where the engine's own
            # Redis-error path backs off and reconciles (a fetch's jobs, an ack's token)
            retry=Retry(NoBackoff(), 0),
            socket_timeout=socket_timeout_seconds,
            socket_connect_timeout=min(socket_timeout_seconds, 5.0),
            health_check_interval=30,
            decode_responses=False,
            **options,
        )

    return cast(redis.Redis, LazyCluster(build))


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a cluster client (its node-wide commands need a target node)."""
    return isinstance(client, (LazyCluster, redis.cluster.RedisCluster))


def node_client(client: redis.Redis, key: str) -> redis.Redis:
    """The plain client of the master serving ``key`` (``client`` itself without a cluster): for
    a connection of one's own on that node (basic fetch's BRPOP connections)."""
    cluster = _cluster_of(client)
    if cluster is not None:
        node = cluster.get_node_from_key(key)
        if node is None or node.redis_connection is None:
            raise redis.ConnectionError(f"no cluster node serves the slot of {key!r} yet")
        return node.redis_connection
    return client


def read_slot_map_again(client: redis.Redis) -> None:
    """Have a cluster client read the slot map again (nothing without a cluster): after a
    connection error or a ``MOVED``/``ASK`` on a ``node_client`` of it, which the cluster client
    itself did not see, so the next ``node_client`` names the master serving the slot now."""
    cluster = _cluster_of(client)
    if cluster is None:
        return
    try:
        cluster.nodes_manager.initialize()
    except (redis.RedisError, OSError):  # no node answers now: read again at the cluster client's next error
        pass


def master_name(client: redis.Redis, key: str) -> str:
    """``host:port`` of the cluster master serving ``key`` now ("" without a cluster)."""
    cluster = _cluster_of(client)
    if cluster is None:
        return ""
    node = cluster.get_node_from_key(key)
    return str(node.name) if node is not None else ""


def client_id(client: redis.Redis, *, key: str) -> int:
    """``CLIENT ID`` of the connection ``client`` uses for ``key``: with a cluster, of its
    connection to the master serving ``key``, which a blocking command on ``key`` uses next
    (one thread, last in first out)."""
    cluster = _cluster_of(client)
    if cluster is not None:
        return int(cluster.execute_command("CLIENT ID", target_nodes=cluster.get_node_from_key(key)))
    return int(client.client_id())


def client_unblock(client: redis.Redis, connection_id: int, *, key: str) -> None:
    """``CLIENT UNBLOCK`` a connection blocked on ``key`` (with a cluster, sent to the master
    serving ``key``, where that connection is)."""
    cluster = _cluster_of(client)
    if cluster is not None:
        cluster.execute_command("CLIENT UNBLOCK", connection_id, target_nodes=cluster.get_node_from_key(key))
    else:
        client.client_unblock(connection_id)


def master_infos(client: redis.Redis, section: str | None = None) -> dict[str, dict[str, Any]]:
    """``INFO section`` of every master, by ``host:port`` (one entry without a cluster): a
    cluster client would otherwise ask one node of its choice."""
    cluster = _cluster_of(client)
    if cluster is not None:
        replies = cluster.info(section, target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        if isinstance(replies, dict) and all(isinstance(reply, dict) for reply in replies.values()):
            return {str(name): reply for name, reply in replies.items()}
        return {"cluster": replies}
    pool = getattr(client, "connection_pool", None)
    where = pool.connection_kwargs.get("host", "redis") if pool is not None else "redis"
    return {str(where): client.info(section)}


def _build(target: _Target, pool_size: int | None = None) -> redis.Redis:
    timeout = target.socket_timeout_seconds
    if target.cluster:
        return _cluster_client(target, socket_timeout_seconds=timeout, pool_size=pool_size)
    if target.cache_alias:
        from django_redis import get_redis_connection

        return get_redis_connection(target.cache_alias)
    if target.sentinels:
        return _sentinel_master(target, socket_timeout_seconds=timeout, pool_size=pool_size)
    return lean_redis.from_url(
        target.url,
        socket_timeout=timeout,
        socket_connect_timeout=min(timeout, 5.0),
        health_check_interval=30,
        max_connections=pool_size,
        decode_responses=False,
    )


#: The Sentinel-managed pools this process made (its own clients and django-redis aliases').
_sentinel_pools: weakref.WeakSet[redis.sentinel.SentinelConnectionPool] = weakref.WeakSet()


def _remember(client: redis.Redis) -> redis.Redis:
    if isinstance(client, LazyCluster):  # one pool per node, none of them Sentinel's
        return client
    pool = getattr(client, "connection_pool", None)
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        _sentinel_pools.add(pool)
    return client


_followed_at = 0.0


def follow_sentinel_master(*, at_most_every_seconds: float = 0.0) -> None:
    """Ask the Sentinels where each master is now: the heartbeat does at every beat, producers at
    most once a second (``at_most_every_seconds``) before a push; without Sentinel, nothing.

    A connection opened before a failover stays with the old server: after a crash that is
    harmless (it breaks), but after a partition the old master comes back still a master for
    ~10 s, until Sentinel demotes it and drops its data. Once a pool has learned the new address,
    its idle connections to the old one are closed and a busy one is closed when it is returned,
    so the process follows the new master within a beat instead of writing to the old one.
    """
    global _followed_at
    if not _sentinel_pools:
        return
    now = time.monotonic()
    if now - _followed_at < at_most_every_seconds:
        return
    _followed_at = now
    for pool in list(_sentinel_pools):
        try:
            pool.get_master_address()
        except CONNECTION_ERRORS:  # no Sentinel answers now: keep the connections we have
            pass


def get_redis(shard: str | None = None) -> redis.Redis:
    """The process-wide client of ``shard`` (default: ``shards.current()``); rebuilt when the
    settings that shape it change (tests)."""
    name = shard or shards.current()
    seen = _settings_seen()
    cached = _clients.get(name)
    if cached is not None and _same_settings(cached[0], seen):
        return cached[2]
    target = _target(name)
    with _lock:
        cached = _clients.get(name)
        if cached is None or cached[1] != target:
            cached = (seen, target, _remember(_build(target)))
        else:  # new settings objects, same Redis: keep the client and its pool
            cached = (seen, target, cached[2])
        _clients[name] = cached
        return cached[2]


def _own_pool_like(base: redis.Redis, socket_timeout_seconds: float) -> redis.Redis:
    """A client with a new pool shaped like ``base``'s (a django-redis alias), longer timeout."""
    pool = base.connection_pool
    kwargs = dict(pool.connection_kwargs)
    kwargs["socket_timeout"] = max(kwargs.get("socket_timeout") or 0, socket_timeout_seconds)
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        # django-redis's SentinelClient: the pool finds the master through its Sentinel manager;
        # its connection kwargs hold the old pool's proxy, which the new pool replaces.
        kwargs.pop("connection_pool", None)
        new_pool: redis.ConnectionPool = redis.sentinel.SentinelConnectionPool(
            pool.service_name,
            pool.sentinel_manager,
            is_master=pool.is_master,
            check_connection=pool.check_connection,
            connection_class=pool.connection_class,
            **kwargs,
        )
    else:
        new_pool = pool.__class__(connection_class=pool.connection_class, **kwargs)
    return redis.Redis(connection_pool=new_pool)


def new_redis(*, blocking_timeout_seconds: float = 0.0, shard: str | None = None) -> redis.Redis:
    """A client with its own pool, for a thread that blocks (BLMOVE/BRPOP) on its connection.

    Its socket timeout exceeds the longest block so a quiet queue is not mistaken for a dead
    server.
    """
    target = _target(shard or shards.current())
    if target.cluster:
        timeout = max(target.socket_timeout_seconds, blocking_timeout_seconds + 5)
        return _cluster_client(target, socket_timeout_seconds=timeout, pool_size=None)
    if target.cache_alias:
        from django_redis import get_redis_connection

        return _remember(_own_pool_like(get_redis_connection(target.cache_alias), blocking_timeout_seconds + 5))
    timeout = max(target.socket_timeout_seconds, blocking_timeout_seconds + 5)
    if target.sentinels:
        return _remember(_sentinel_master(target, socket_timeout_seconds=timeout, pool_size=None))
    return lean_redis.from_url(
        target.url,
        socket_timeout=timeout,
        socket_connect_timeout=5.0,
        health_check_interval=30,
        decode_responses=False,
    )


def as_bytes(value: object) -> bytes:
    """A reply as bytes (the engine's clients never decode; typing says ``bytes | str``)."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def as_text(value: object) -> str:
    """A reply as text, invalid UTF-8 replaced (identities, queue names)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def reset() -> None:
    """Forget every client (after fork, or when a test points the engine at another server)."""
    _clients.clear()
    _sentinel_pools.clear()
    _modes.clear()


#: shard name -> (the JOBSAPP setting it was read from, whether it is a cluster, its partitions)
_modes: dict[str, tuple[object, bool, int]] = {}


def _mode(shard: str | None) -> tuple[object, bool, int]:
    """A shard's cluster mode and partitions. Both come from ``settings.JOBSAPP`` alone (its
    SHARDS entry or its top level, else the defaults), so the answer is kept until that object
    is replaced (override_settings, a test's ``settings`` fixture): every key name asks, and the
    check costs one attribute read. The JOBSAPP object is held by the cache, so its identity is
    never reused while compared."""
    name = shard or shards.current()
    jobsapp = getattr(settings, "JOBSAPP", None)
    cached = _modes.get(name)
    if cached is not None and cached[0] is jobsapp:
        return cached
    cluster = bool(shards.setting(name, "REDIS_CLUSTER"))
    count = shards.setting(name, "CLUSTER_PARTITIONS") if cluster else 1
    count = count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else 1  # else check jobsapp.E006 says so
    entry = _modes[name] = (jobsapp, cluster, count)
    return entry


def cluster_mode(shard: str | None = None) -> bool:
    """Whether ``shard`` (default: ``shards.current()``) is a Redis Cluster: its keys then carry
    hash tags. Kept until ``settings.JOBSAPP`` is replaced, so a key name costs a dictionary
    lookup or two."""
    return _mode(shard)[1]


def partition_count(shard: str | None = None) -> int:
    """How many partitions ``shard``'s queues are spread over (``CLUSTER_PARTITIONS`` on a
    cluster, else 1)."""
    return _mode(shard)[2]


def _partition_count() -> int:
    return _mode(None)[2]


keys.use_cluster_mode_source(cluster_mode, _partition_count)


def describe_url(url: str) -> str:
    """``url`` without its credentials (``jobsapp.redaction.redact_url``: a URL parser)."""
    return redact_url(url)


def describe(shard: str | None = None) -> str:
    """Where the engine connects, without a password, for banners and error messages."""
    name = shard or shards.current()
    target = _target(name)
    if target.cluster:
        where = f"Redis Cluster via {describe_url(target.url)}"
    elif target.cache_alias:
        where = f"cache alias {target.cache_alias!r}"
    elif target.sentinels:
        addresses = ",".join(f"{host}:{port}" for host, port in target.sentinels)
        where = f"Sentinel service {target.sentinel_service!r} via {addresses}"
    else:
        where = describe_url(target.url)
    return where if name == shards.DEFAULT else f"{where} (shard {name!r})"


def unavailable(exc: BaseException, *, shard: str | None = None) -> RedisUnavailable:
    """The documented error raised to callers when Redis does not answer or refuses writes."""
    if refuses_writes(exc):
        return RedisUnavailable(f"Redis at {describe(shard)} refuses writes: {refusal_reason(exc)}")
    return RedisUnavailable(f"Redis is unavailable at {describe(shard)}: {exc}")


os.register_at_fork(after_in_child=reset)
