"""The process records of the Redis layout (docs/redis-layout.md): the ``processes`` SET of
identities and each identity's ``<identity>`` HASH (60 s TTL, refreshed by its heartbeat).

Also the duration histograms beside them (``jobsapp:durations:<identity>``, HASH class -> JSON
``{"buckets": {"<upper bound, seconds>": cumulative count, ..., "+Inf": n}, "sum": seconds,
"count": n}``, cumulative since the process started): ``DurationHistogram`` owns that shape (its
``encode`` is what the heartbeat writes, ``decode`` how ``api.processes`` reads one back,
leniently); ``DurationCounter`` is what a worker counts into.

A wire-format module: ``heartbeat`` writes these records, ``recovery`` prunes the dead ones after a
sweep, ``api.processes`` lists them; none of those imports another. A name in ``processes`` whose
HASH has expired (no ``info`` field) is a dead process, for Ruby Sidekiq as for us.

No thread of its own: called from the caller's thread, with the caller's connection.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any

from . import keys
from .connection import as_text
from .payload import compact_json, parse_json

#: The heartbeat HASH fields a reader asks for, in this order.
PROCESS_FIELDS = ("info", "busy", "beat", "quiet", "rss", "rtt_us")


def identities(connection: Any) -> list[str]:
    """Every name in ``processes``, sorted (live or not)."""
    return sorted(as_text(name) for name in connection.smembers(keys.PROCESSES))


def prune_dead(connection: Any) -> int:
    """Remove identities whose heartbeat hash expired, as Sidekiq's ``ProcessSet#cleanup``;
    returns how many."""
    names = identities(connection)
    if not names:
        return 0
    pipe = connection.pipeline(transaction=False)
    for identity in names:
        pipe.hexists(keys.process(identity), "info")
    dead = [identity for identity, alive in zip(names, pipe.execute(), strict=True) if not alive]
    return int(connection.srem(keys.PROCESSES, *dead)) if dead else 0


#: Upper bounds (seconds) of the duration buckets a worker counts into; "+Inf" counts every job.
DURATION_BUCKETS_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True)
class DurationHistogram:
    """One job class's durations: cumulative bucket counts by upper bound (seconds; ``inf`` last,
    Prometheus's ``le``), their sum and count. ``encode`` and ``decode`` are the JSON of one field
    of ``jobsapp:durations:<identity>`` (the header's shape)."""

    buckets: dict[float, int]
    sum_seconds: float
    count: int

    def encode(self) -> str:
        """The JSON the heartbeat writes (NaN is let through: a heartbeat must not fail over a metric)."""
        buckets = {"+Inf" if math.isinf(bound) else repr(bound): count for bound, count in self.buckets.items()}
        return compact_json({"buckets": buckets, "sum": self.sum_seconds, "count": self.count}, allow_nan=True)

    def plus(self, other: DurationHistogram) -> DurationHistogram:
        """Both histograms summed bucket by bucket (two processes' counts), bounds in order."""
        buckets = dict(self.buckets)
        for bound, count in other.buckets.items():
            buckets[bound] = buckets.get(bound, 0) + count
        return DurationHistogram(dict(sorted(buckets.items())), self.sum_seconds + other.sum_seconds, self.count + other.count)

    @classmethod
    def decode(cls, raw: bytes | str) -> DurationHistogram | None:
        """A stored histogram, read leniently (hostile writers exist): None when it is not one,
        malformed buckets skipped, a malformed sum or count read as 0."""
        try:
            value = parse_json(raw)
        except ValueError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("buckets"), dict):
            return None
        buckets: dict[float, int] = {}
        for bound_text, count in value["buckets"].items():
            try:
                bound = float(bound_text)
            except ValueError:
                continue
            if isinstance(count, int):
                buckets[bound] = count
        total = value.get("sum")
        count = value.get("count")
        return cls(
            buckets,
            float(total) if isinstance(total, (int, float)) and not isinstance(total, bool) else 0.0,
            count if isinstance(count, int) and not isinstance(count, bool) else 0,
        )


class DurationCounter:
    """The worker's side: per-class durations since the process started (``observe`` from the
    thread that records a finished job, under the manager's lock), ``snapshot`` for the heartbeat."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}

    def observe(self, job_class: str, seconds: float) -> None:
        counts = self.counts.get(job_class)
        if counts is None:
            counts = self.counts[job_class] = [0] * (len(DURATION_BUCKETS_SECONDS) + 1)
            self.sums[job_class] = 0.0
        counts[bisect.bisect_left(DURATION_BUCKETS_SECONDS, seconds)] += 1
        self.sums[job_class] += seconds

    def snapshot(self) -> dict[str, DurationHistogram]:
        result: dict[str, DurationHistogram] = {}
        for job_class, counts in self.counts.items():
            cumulative = 0
            buckets: dict[float, int] = {}
            for bound, count in zip((*DURATION_BUCKETS_SECONDS, math.inf), counts, strict=True):
                cumulative += count
                buckets[bound] = cumulative
            result[job_class] = DurationHistogram(buckets, self.sums[job_class], cumulative)
        return result
