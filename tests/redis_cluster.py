"""A throwaway Redis Cluster for tests: its own redis-servers on free loopback ports, own
directories, nothing saved to disk, formed with ``redis-cli --cluster create``.

Three masters by default (the slots split 0-5460, 5461-10922, 10923-16383), and optionally one
replica each. ``cluster-node-timeout`` is short (2 s) so a SIGKILLed master's replica is promoted
within a few seconds. Only the servers it started are ever stopped.
"""

from __future__ import annotations

import random
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence

import redis
import redis.cluster

from tests.redis_server import RedisServer

NODE_TIMEOUT_MILLISECONDS = 2000
#: Redis listens for its cluster bus on the data port + 10000, so data ports stay below 55536.
BUS_PORT_OFFSET = 10000


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port(taken: set[int]) -> int:
    """A free loopback port whose cluster bus port (+10000) is free too."""
    for _ in range(1000):
        port = random.randint(20000, 55535 - 1)
        if port in taken or port + BUS_PORT_OFFSET in taken:
            continue
        if _port_is_free(port) and _port_is_free(port + BUS_PORT_OFFSET):
            taken.update((port, port + BUS_PORT_OFFSET))
            return port
    raise RuntimeError("no free pair of loopback ports for a cluster node")


class RedisClusterServers:
    def __init__(self, *, masters: int = 3, replicas_per_master: int = 0, extra_args: Sequence[str] = ()) -> None:
        self.cli = shutil.which("redis-cli")
        if self.cli is None:
            raise RuntimeError("redis-cli is not on PATH: install Redis >= 6.2 (Debian: apt-get install redis-tools)")
        self.masters = masters
        self.replicas_per_master = replicas_per_master
        self.nodes: list[RedisServer] = []
        count = masters * (1 + replicas_per_master)
        taken: set[int] = set()
        for _ in range(count):
            port = free_cluster_port(taken)
            self.nodes.append(
                RedisServer(
                    port=port,
                    extra_args=[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        f"nodes-{port}.conf",
                        "--cluster-node-timeout",
                        str(NODE_TIMEOUT_MILLISECONDS),
                        # a replica may always take over (its master may die before it was ever in sync)
                        "--cluster-replica-validity-factor",
                        "0",
                        *extra_args,
                    ],
                )
            )

    @property
    def url(self) -> str:
        """A URL naming one node (as a managed service's configuration endpoint does)."""
        return self.nodes[0].url

    def start(self) -> RedisClusterServers:
        try:
            for node in self.nodes:
                node.start()
            if len(self.nodes) == 1:  # redis-cli creates clusters of three masters or more: one takes every slot
                self.nodes[0].client().execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
                self.wait_until_ready()
                return self
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            replicas = str(self.replicas_per_master)
            command = [str(self.cli), "--cluster", "create", *addresses, "--cluster-replicas", replicas, "--cluster-yes"]
            created = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]} {created.stderr[-2000:]}")
            self.wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_until_ready(self, *, timeout_seconds: float = 30.0) -> None:
        """Until every node says cluster_state:ok and sees every slot covered, and every replica
        is in sync with its master (so a killed master's replica has its data)."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            states = []
            for node in self.nodes:
                if node.process is None or node.process.poll() is not None:
                    continue
                try:
                    info = node.client().cluster("info")
                except redis.RedisError:
                    states.append(False)
                    continue
                in_sync = True
                if self.replicas_per_master:
                    replication = node.client().info("replication")
                    in_sync = replication.get("role") == "master" or replication.get("master_link_status") == "up"
                states.append(info.get("cluster_state") == "ok" and int(info.get("cluster_slots_ok", 0)) == 16384 and in_sync)
            if states and all(states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.05)

    def client(self, **kwargs: object) -> redis.cluster.RedisCluster:
        """A cluster client (bytes responses), for asserting on keys."""
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, **kwargs)  # type: ignore[arg-type]

    def tagged_client(self) -> TaggedClusterClient:
        """A cluster client that puts partition 0's hash tag on plain key names (see below)."""
        from jobsapp import keys

        return TaggedClusterClient(host="127.0.0.1", port=self.nodes[0].port, tag_prefix="{" + keys.partition_tag(0, 1) + "}:")

    def master_nodes(self) -> list[RedisServer]:
        """The servers that are masters now, in the order of their first slot."""
        found: list[tuple[int, RedisServer]] = []
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            try:
                role = node.client().execute_command("ROLE")
            except redis.RedisError:
                continue
            if role[0] != b"master":
                continue
            slots = node.client().execute_command("CLUSTER", "SLOTS")
            own = [entry[0] for entry in slots if int(entry[2][1]) == node.port]
            found.append((min(own) if own else 1 << 20, node))
        return [node for _, node in sorted(found, key=lambda pair: pair[0])]

    def master_nodes_among_live(self) -> list[RedisServer]:
        """The servers that answer and say they are masters, without asking about slots (some
        masters may be frozen)."""
        found = []
        for node in self.nodes:
            try:
                role = node.client(socket_timeout=0.5).execute_command("ROLE")
            except (redis.RedisError, OSError):
                continue
            if role[0] == b"master":
                found.append(node)
        return found

    def flushall(self) -> None:
        """Empty every master (replicas follow)."""
        for node in self.master_nodes():
            node.client().flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


#: The engine's key names (docs/redis-layout.md) as tests spell them: Sidekiq's, ours, and the
#: process keys named after an identity (``host:pid:<12 hex>``).
ENGINE_KEY = re.compile(
    r"^((queues|schedule|retry|dead|processes|cron_jobs)$|queue:|stat:|jobsapp:|cron_job:|[^:{}]+:\d+:[0-9a-f]{12}($|[:-]))"
)


class TaggedClusterClient(redis.cluster.RedisCluster):
    """A cluster client for tests written against Sidekiq's plain key names: an engine key
    (``ENGINE_KEY``) without a hash tag gets partition 0's tag in front (``queue:default`` becomes
    ``{jobsapp:0}:queue:default``), so a test reads and writes the engine's keys in cluster mode
    as it does standalone; a test's own keys (what its jobs record) stay as they are, as the jobs
    write them. Key positions come from ``COMMAND INFO`` (EVAL/EVALSHA: their numkeys); keys in
    replies (SCAN, KEYS) keep their tag."""

    def __init__(self, *args: object, tag_prefix: str, **kwargs: object) -> None:
        self.tag_prefix = tag_prefix.encode("utf-8")
        self._key_specs: dict[str, tuple[int, int, int]] = {}
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def _tagged(self, key: object) -> object:
        text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        if not isinstance(text, str) or not ENGINE_KEY.match(text):
            return key
        if isinstance(key, bytes):
            return self.tag_prefix + key
        return self.tag_prefix.decode("utf-8") + text

    def _key_spec(self, name: str) -> tuple[int, int, int]:
        spec = self._key_specs.get(name)
        if spec is None:
            if getattr(self, "commands_parser", None) is None:  # starting up: only its own keyless commands
                return (0, 0, 0)
            entry = self.commands_parser.commands.get(name.lower())  # COMMAND's reply, read by redis-py at start
            spec = (int(entry["first_key_pos"]), int(entry["last_key_pos"]), int(entry["step_count"])) if entry else (0, 0, 0)
            self._key_specs[name] = spec
        return spec

    def tag_arguments(self, args: tuple[object, ...]) -> tuple[object, ...]:
        if not args:
            return args
        name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        name = name.split(" ")[0].upper()
        arguments = list(args)
        words = [(arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)).upper() for arg in arguments]
        if name == "KEYS" or (name == "SCAN" and "MATCH" in words):
            position = 1 if name == "KEYS" else words.index("MATCH") + 1
            arguments[position] = self._tagged(arguments[position])
            return tuple(arguments)
        if name in ("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL"):
            count = int(arguments[2])  # type: ignore[call-overload]
            positions = range(3, 3 + count)
        else:
            first, last, step = self._key_spec(name)
            if first <= 0 or step <= 0:
                return args
            end = len(arguments) + last if last < 0 else last
            positions = range(first, min(end, len(arguments) - 1) + 1, step)
        for position in positions:
            arguments[position] = self._tagged(arguments[position])
        return tuple(arguments)

    def execute_command(self, *args: object, **kwargs: object) -> object:
        return super().execute_command(*self.tag_arguments(args), **kwargs)

    def keys(self, pattern: object = "*", **kwargs: object) -> object:  # type: ignore[override]
        """``KEYS`` on the master of the tag's slot for an engine pattern (redis-py would ask one
        node of its choice), on every master otherwise."""
        tagged = self._tagged(pattern)
        if tagged is pattern:
            return super().keys(pattern, target_nodes=redis.cluster.RedisCluster.PRIMARIES, **kwargs)  # type: ignore[arg-type]
        return super().execute_command("KEYS", tagged, target_nodes=self.get_node_from_key(tagged), **kwargs)

    def close(self) -> None:
        """Close the connections, and stay usable (as a plain client does after ``close``)."""
        self.disconnect_connection_pools()

    def pipeline(self, transaction: object = None, shard_hint: object = None) -> redis.cluster.ClusterPipeline:
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        original = pipe.execute_command

        def tagged(*args: object, **kwargs: object) -> object:
            return original(*self.tag_arguments(args), **kwargs)

        pipe.execute_command = tagged  # type: ignore[method-assign]
        return pipe


def tagged_client_from_url(url: str, **options: object) -> TaggedClusterClient:
    """``TaggedClusterClient`` on the cluster node ``url`` names (worker helpers of the tests)."""
    from jobsapp import keys

    return TaggedClusterClient.from_url(url, tag_prefix="{" + keys.partition_tag(0, 1) + "}:", **options)  # type: ignore[return-value]


def migrate_slot(cluster: RedisClusterServers, slot: int, target: RedisServer, *, keys_per_call: int = 10) -> int:
    """Move ``slot`` to the master ``target`` as ``redis-cli --cluster reshard`` does, key by key
    (``SETSLOT IMPORTING/MIGRATING``, ``MIGRATE``, ``SETSLOT NODE``), while clients keep using it
    (they get ``ASK`` for the keys already moved); how many keys moved."""
    masters = cluster.master_nodes()
    source = next(node for node in masters if any(low <= slot <= high for low, high in _slot_ranges(node)))
    source_id, target_id = _node_id(source), _node_id(target)
    target.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    source.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    moved = 0
    while True:
        names = source.client().execute_command("CLUSTER", "GETKEYSINSLOT", slot, keys_per_call)
        if not names:
            break
        source.client().execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "REPLACE", "KEYS", *names)
        moved += len(names)
    for node in masters:
        node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    return moved


def _node_id(node: RedisServer) -> str:
    value = node.client().execute_command("CLUSTER", "MYID")
    return value.decode() if isinstance(value, bytes) else str(value)


def _slot_ranges(node: RedisServer) -> list[tuple[int, int]]:
    ranges = []
    for low, high, owner, *_ in node.client().execute_command("CLUSTER", "SLOTS"):
        if int(owner[1]) == node.port:
            ranges.append((int(low), int(high)))
    return ranges
