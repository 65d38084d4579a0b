"""The ledger checker: where is every job, and did it run?

Each fault scenario enqueues jobs whose first argument is a ledger id, breaks something, lets the
system settle, and calls ``check``. It reads the ledger Redis (attempts and completions written by
the jobs in ``tests.faults.jobs``) and every place the engine may hold a job in its Redis:

    done      ledger:done[id] >= 1 (``perform`` returned) and the job is nowhere else
    queue     a ``queue:<name>`` list
    schedule  / retry / dead: Sidekiq's sorted sets
    inflight  a ``jobsapp:inflight:<identity>`` list (a job nobody recovered: stuck)

A job is *lost* when it is in no place at all, *misplaced* when it is in more than one (done and
still queued, or queued and in retry), and *duplicated* when it finished more than once (the
at-least-once price; counted and reported, never hidden).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis

from tests.faults.jobs import ATTEMPTS, DONE


def ledger_id_of(raw: bytes) -> str | None:
    try:
        item = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(item, dict):
        return None
    args = item.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        return args[0]
    return None


@dataclass
class Report:
    expected: int
    places: dict[str, list[str]] = field(default_factory=dict)  # id -> places it was found in
    attempts: dict[str, int] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)

    @property
    def lost(self) -> list[str]:
        return sorted(ledger_id for ledger_id, where in self.places.items() if not where)

    @property
    def misplaced(self) -> dict[str, list[str]]:
        return {ledger_id: where for ledger_id, where in self.places.items() if len(where) > 1}

    @property
    def never_ran(self) -> list[str]:
        return sorted(ledger_id for ledger_id in self.places if not self.attempts.get(ledger_id))

    @property
    def duplicates(self) -> int:
        """Extra completions: a job that finished twice counts 1."""
        return sum(count - 1 for count in self.done.values() if count > 1)

    @property
    def duplicated_ids(self) -> int:
        return sum(1 for count in self.done.values() if count > 1)

    def count(self, place: str) -> int:
        return sum(1 for where in self.places.values() if place in where)

    def summary(self) -> str:
        places = Counter(place for where in self.places.values() for place in where)
        return (
            f"{self.expected} jobs: lost {len(self.lost)}, misplaced {len(self.misplaced)}, "
            f"never ran {len(self.never_ran)}, duplicates {self.duplicates} ({self.duplicated_ids} jobs); "
            f"places {dict(sorted(places.items()))}"
        )

    def assert_clean(self, *, allowed_places: Iterable[str] = ("done",), must_run: bool = True) -> None:
        """Nothing lost, nothing in two places, nothing stuck in flight, only ``allowed_places``."""
        allowed = set(allowed_places)
        problems = []
        if self.lost:
            problems.append(f"lost: {self.lost[:10]}")
        if self.misplaced:
            problems.append(f"in more than one place: {dict(list(self.misplaced.items())[:10])}")
        unexpected = {ledger_id: where for ledger_id, where in self.places.items() if set(where) - allowed}
        if unexpected:
            problems.append(f"in places other than {sorted(allowed)}: {dict(list(unexpected.items())[:10])}")
        if must_run and self.never_ran:
            problems.append(f"never ran: {self.never_ran[:10]}")
        assert not problems, f"{self.summary()}\n" + "\n".join(problems)


def check(engine: redis.Redis, ledger: redis.Redis, ids: Iterable[str]) -> Report:
    """Locate every id; read the engine's Redis without changing it."""
    wanted = set(ids)
    places: dict[str, list[str]] = defaultdict(list)

    def found(raw: bytes, place: str) -> None:
        ledger_id = ledger_id_of(raw)
        if ledger_id in wanted:
            places[ledger_id].append(place)

    for key in engine.scan_iter(match=b"queue:*", count=1000):
        if engine.type(key) == b"list":
            for raw in engine.lrange(key, 0, -1):
                found(raw, "queue")
    for key in engine.scan_iter(match=b"jobsapp:inflight:*", count=1000):
        for raw in engine.lrange(key, 0, -1):
            found(raw, "inflight")
    for set_key in ("schedule", "retry", "dead"):
        for raw in engine.zrange(set_key, 0, -1):
            found(raw, set_key)
    attempts = {key.decode(): int(value) for key, value in ledger.hgetall(ATTEMPTS).items()}
    done = {key.decode(): int(value) for key, value in ledger.hgetall(DONE).items()}
    for ledger_id in wanted:
        if done.get(ledger_id):
            places[ledger_id].append("done")
    return Report(
        expected=len(wanted),
        places={ledger_id: places.get(ledger_id, []) for ledger_id in sorted(wanted)},
        attempts={ledger_id: attempts.get(ledger_id, 0) for ledger_id in wanted},
        done={ledger_id: done.get(ledger_id, 0) for ledger_id in wanted},
    )
