"""The cluster key scheme, without a server: every script's KEYS hash to one slot (CRC16, as
Redis Cluster computes it), in every partition; outside cluster mode the names are Sidekiq's.

Each wrapper of jobsapp.scripts is called as the engine calls it, with its runner replaced by one
that records the KEYS it was given and answers as the script would; the slots of those keys are
then computed in Python (redis-py's ``key_slot``, the cluster specification's CRC16).
"""

from __future__ import annotations

import ast
import datetime as dt
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from jobsapp import keys, scripts, shards

ROOT = Path(__file__).resolve().parents[2]

#: What each script answers, shaped as its wrapper parses it.
REPLIES: dict[str, Any] = {
    "fetch": ([], [], 0),
    "ack": (1, 1),
    "batch_update": (0, b""),
    "periodic_claim": (1, b"pushed", b""),
    "result_write": [1],
    "chord_part": (1, 1, 0),
    "limiter_concurrent": (1, 0),
    "limiter_window": (1, 0),
    "limiter_bucket": (1, 0),
}


class RecordingRunner:
    def __init__(self, name: str, calls: list[tuple[str, list[str]]]) -> None:
        self.name = name
        self.calls = calls

    def __call__(self, client: object, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        self.calls.append((self.name, [str(key) for key in keys]))
        return REPLIES.get(self.name, 1)


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[str, list[str]]]:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(scripts, "script", lambda name: RecordingRunner(name, calls))
    return calls


@pytest.fixture
def cluster_mode() -> Iterator[None]:
    keys.use_cluster_mode_source(lambda: True, lambda: 3)
    try:
        yield
    finally:
        from jobsapp import connection

        keys.use_cluster_mode_source(connection.cluster_mode, connection._partition_count)


def call_every_script(identity: str = "host:1:0123456789ab") -> None:
    """Each wrapper once (twice where an optional key may be left out), as the engine calls it."""
    inflight = keys.inflight(identity)
    scripts.retry(None, inflight_key=inflight, target_set=keys.RETRY, raw=b"{}", score=1.0, member="{}", jid="j")  # type: ignore[arg-type]
    scripts.retry(None, inflight_key="", target_set=keys.DEAD, raw=b"{}", score=1.0, member="{}", jid="j")  # type: ignore[arg-type]
    scripts.recover_requeue(None, inflight_key=inflight, raw=b"{}", queue="default", jid="j", marked=b"", blamed=True)  # type: ignore[arg-type]
    scripts.recover_bury(None, inflight_key=inflight, raw=b"{}", member="{}", jid="j", died_at=1.0, dead_cutoff="0", dead_max_jobs=10)  # type: ignore[arg-type]
    scripts.schedule_move(None, set_key=keys.SCHEDULE, moves=[(b"{}", "default", b"{}"), (b"{}", "other", b"{}")])  # type: ignore[arg-type]
    scripts.unique_push(None, lock_key=keys.unique_lock("d"), ttl_ms=1, jid="j", data="{}", queue="default", at=None)  # type: ignore[arg-type]
    scripts.unique_push(None, lock_key=keys.unique_lock("d"), ttl_ms=1, jid="j", data="{}", queue="default", at=5.0)  # type: ignore[arg-type]
    scripts.unique_release(None, digest="d", jid="j")  # type: ignore[arg-type]
    scripts.relay_lock(None, token="t", ttl_seconds=1.0)  # type: ignore[arg-type]
    scripts.relay_unlock(None, token="t")  # type: ignore[arg-type]
    permits = keys.limiter_permits(identity)
    scripts.limiter_concurrent(None, name="l", token="t", size=1, lock_timeout_seconds=1.0, permits_key=permits)  # type: ignore[arg-type]
    scripts.limiter_window(None, name="l", token="t", count=1, per_seconds=1.0)  # type: ignore[arg-type]
    scripts.limiter_bucket(None, name="l", count=1, per_seconds=1.0)  # type: ignore[arg-type]
    scripts.limiter_release(None, name="l", token="t", permits_key=permits)  # type: ignore[arg-type]
    scripts.limiter_park(None, name="l", member="{}", size=1, max_parked=1, ttl_seconds=1)  # type: ignore[arg-type]
    scripts.api_move_to_queue(None, set_key=keys.DEAD, member=b"{}", queue="default", data=b"{}")  # type: ignore[arg-type]
    scripts.api_kill(None, set_key=keys.RETRY, member=b"{}", now=1.0, oldest_kept=0.0, dead_max_jobs=1)  # type: ignore[arg-type]
    for level in (None, 5):  # a plain job to the queue's list, a prioritised one to its priority ZSET
        scripts.periodic_claim(
            None,  # type: ignore[arg-type]
            name="p",
            queue="default",
            level=level,
            tick=1,
            tick_before=0,
            tick_iso="",
            tick_ruby="",
            data="{}",
            jid="j",
            missed="",
            missed_after_seconds=1,
            jid_history_size=1,
        )
    for complete, success, level in (("default", "other", None), ("", "", None), ("default", "other", 5)):
        scripts.batch_update(
            None,  # type: ignore[arg-type]
            bid="b",
            event="succeeded",
            jid="j",
            complete_queue=complete,
            success_queue=success,
            complete_jid="",
            success_jid="",
            ttl_seconds=1,
            linger_seconds=1,
            complete_level=level,
            success_level=level,
        )
    changes = [("j1", 1.0, "finish", {}), ("j2", 1.0, "start", {"a": "b"})]
    scripts.result_write(None, now=1.0, changes=changes, ttl_max_seconds=1, max_records=1)  # type: ignore[arg-type]
    scripts.fetch(None, inflight_key=inflight, queue_names=["default", "other"], count=1)  # type: ignore[arg-type]
    for inflight_key, token_key in ((inflight, keys.last_ack(identity)), ("", "")):
        scripts.ack(
            None,  # type: ignore[arg-type]
            inflight_key=inflight_key,
            raws=[b"{}"],
            jids=["j"],
            processed=1,
            failed=0,
            today=dt.date(2026, 1, 1),
            daily_ttl_seconds=1,
            token_key=token_key,
        )
    scripts.requeue(None, inflight_key=inflight, jobs=[(b"{}", "default"), (b"{}", "other")])  # type: ignore[arg-type]
    # a prioritised job goes to its queue's priority ZSET (jobsapp.priority), with the index and the counter
    prioritised = b'{"priority":5}'
    scripts.requeue(None, inflight_key=inflight, jobs=[(prioritised, "default"), (b"{}", "other")])  # type: ignore[arg-type]
    scripts.priority_push(None, queue="default", level=5, data=prioritised)  # type: ignore[arg-type]
    scripts.schedule_move(None, set_key=keys.RETRY, moves=[(b"{}", "default", prioritised), (b"{}", "other", b"{}")])  # type: ignore[arg-type]
    scripts.recover_requeue(None, inflight_key=inflight, raw=prioritised, queue="default", jid="j", marked=b"", blamed=True)  # type: ignore[arg-type]
    scripts.requeue(None, inflight_key="", jobs=[(b"{}", "default")])  # type: ignore[arg-type]
    for level in (None, -30):
        scripts.chord_part(
            None,  # type: ignore[arg-type]
            chord_id="c",
            jid="j",
            value_json="1",
            header_size=2,
            ttl_seconds=1,
            callback_job=b"{}",
            queue="default",
            level=level,
        )


def slots(names: Sequence[str]) -> set[int]:
    return {key_slot(name.encode()) for name in names}


def test_every_script_is_called_by_the_scan(recorded, standalone_mode):
    # Given every Lua script of the engine
    files = {path.stem for path in scripts.LUA_DIRECTORY.glob("*.lua")}
    # When every wrapper is called once
    call_every_script()
    # Then each script was called, so the slot test below covers them all
    assert {name for name, _ in recorded} == files


@pytest.mark.parametrize("partition", [0, 1, 2])
def test_every_scripts_keys_hash_to_one_slot_in_cluster_mode(recorded, cluster_mode, partition):
    # Given cluster mode and one of three partitions
    with keys.using_partition(partition):
        # When every script is called as the engine calls it
        call_every_script()
    # Then the keys of each call share one slot, the slot of that partition's hash tag
    tag = keys.partition_tag(partition, 3)
    for name, script_keys in recorded:
        assert slots(script_keys) == {key_slot(tag.encode())}, (name, script_keys)


@pytest.fixture
def standalone_mode() -> Iterator[None]:
    keys.use_cluster_mode_source(lambda: False, lambda: 1)
    try:
        yield
    finally:
        from jobsapp import connection

        keys.use_cluster_mode_source(connection.cluster_mode, connection._partition_count)


def test_standalone_names_are_sidekiqs_and_carry_no_tag(recorded, standalone_mode):
    # Given standalone mode
    # When every script is called
    call_every_script()
    # Then no key carries a hash tag, and Sidekiq's names are exactly its own
    assert all("{" not in key for _, script_keys in recorded for key in script_keys)
    assert (keys.QUEUES, keys.SCHEDULE, keys.RETRY, keys.DEAD, keys.PROCESSES) == ("queues", "schedule", "retry", "dead", "processes")
    assert keys.queue("default") == "queue:default"
    assert keys.process("host:1:abc") == "host:1:abc"
    assert keys.stat_processed_daily(dt.date(2026, 1, 2)) == "stat:processed:2026-01-02"
    assert keys.absent() == ""
    assert keys.priority_queue("default") == "jobsapp:pqueue:default" and keys.PRIORITISED == "jobsapp:prioritised"


def test_cluster_names_are_the_standalone_ones_behind_the_partitions_tag(cluster_mode):
    # Given cluster mode with three partitions
    # When names are asked for in partition 1
    with keys.using_partition(1):
        queue = keys.queue("default")
        retry = keys.RETRY
        absent = keys.absent()
    # Then each is its standalone name behind partition 1's tag, which reads back to the name
    tag = keys.partition_tag(1, 3)
    assert queue == f"{{{tag}}}:queue:default"
    assert retry == f"{{{tag}}}:retry"
    assert keys.queue_name(queue) == "default"
    assert absent == f"{{{tag}}}:"


@pytest.mark.parametrize("count", [1, 2, 3, 4, 6, 9])
def test_each_partitions_tag_lies_in_a_share_of_the_slots_of_its_own(count):
    # Given a cluster of `count` equal masters, as redis-cli --cluster create splits the slots
    def share_of(tag: str) -> int:
        return key_slot(tag.encode()) * count // REDIS_CLUSTER_HASH_SLOTS

    # When the tags of `count` partitions are computed
    tags = [keys.partition_tag(index, count) for index in range(count)]
    # Then partition 0 keeps its one tag, and the partitions hash into the shares one each,
    # partition i into the i-th after partition 0's: each partition on its own master
    assert tags[0] == "jobsapp:0"
    home = share_of(tags[0])
    assert [share_of(tag) for tag in tags] == [(home + index) % count for index in range(count)]
    assert len(set(tags)) == count


def key_names_read_at_import(path: Path, *, root: Path = ROOT) -> list[str]:
    """``keys.<NAME>`` read outside any function (a module or class body): evaluated once, at
    import, under whatever settings were in force then."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside_functions = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for inner in ast.walk(node)
    }
    return [
        f"{path.relative_to(root)}:{node.lineno}: keys.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "keys"
        and node.attr.isupper()
        and id(node) not in inside_functions
    ]


def test_no_key_name_is_read_at_import_time():
    # Given every module of the engine and of tracking but keys.py
    modules = [path for package in ("jobsapp", "tracking") for path in sorted((ROOT / package).rglob("*.py")) if path.name != "keys.py"]
    # When their module and class bodies are scanned for key names
    found = [hit for path in modules for hit in key_names_read_at_import(path)]
    # Then none is read there: a name read at import would keep the key scheme of that moment
    assert found == []


def test_the_import_time_scan_finds_a_key_name_in_a_class_body(tmp_path):
    module = tmp_path / "example.py"
    module.write_text("from jobsapp import keys\n\n\nclass Example:\n    name = keys.DEAD\n", encoding="utf-8")
    assert key_names_read_at_import(module, root=tmp_path) == ["example.py:5: keys.DEAD"]


def test_names_follow_a_settings_change_and_the_current_shard(settings):
    # Given standalone settings whose "far" shard is a cluster of three partitions
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_CLUSTER": False, "SHARDS": {"far": {"REDIS_CLUSTER": True, "CLUSTER_PARTITIONS": 3}}}
    # When names are asked for on each shard, then after the settings are replaced
    plain = (keys.QUEUES, keys.queue("default"))
    with shards.using("far"), keys.using_partition(2):
        far = (keys.QUEUES, keys.queue("default"), keys.partition_count())
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_CLUSTER": True, "CLUSTER_PARTITIONS": 2}
    with keys.using_partition(1):
        clustered = (keys.QUEUES, keys.queue("default"), keys.partition_count())
    # Then each answer is the one of the settings and shard in force when it was asked
    assert plain == ("queues", "queue:default")
    assert far == (f"{{{keys.partition_tag(2, 3)}}}:queues", f"{{{keys.partition_tag(2, 3)}}}:queue:default", 3)
    assert clustered == (f"{{{keys.partition_tag(1, 2)}}}:queues", f"{{{keys.partition_tag(1, 2)}}}:queue:default", 2)


def test_daily_names_follow_the_day_asked_for(standalone_mode):
    # Given two days, asked for in turn
    first, second = dt.date(2026, 1, 2), dt.date(2026, 1, 3)
    names = [keys.stat_processed_daily(day) for day in (first, second, first)] + [keys.stat_failed_daily(second)]
    # Then each name carries its own day
    assert names == ["stat:processed:2026-01-02", "stat:processed:2026-01-03", "stat:processed:2026-01-02", "stat:failed:2026-01-03"]
