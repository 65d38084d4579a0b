"""The process records of the Redis layout (docs/redis-layout.md): the ``processes`` SET of
identities and each identity's ``<identity>`` HASH (60 s TTL, refreshed by its heartbeat).

Also the duration histograms beside them (``jobsapp:durations:<identity>``, HASH class -> JSON
``{"buckets": {"<upper bound, seconds>": cumulative count, ..., "+Inf": n}, "sum": seconds,
"count": n}``, cumulative since the process started): ``encode_durations`` is how the heartbeat
writes one, ``decode_durations`` how ``api.processes`` reads one back, leniently.

A wire-format module: ``heartbeat`` writes these records, ``recovery`` prunes the dead ones after a
sweep, ``api.processes`` lists them; none of those imports another. A name in ``processes`` whose
HASH has expired (no ``info`` field) is a dead process, for Ruby Sidekiq as for us.

No thread of its own: called from the caller's thread, with the caller's connection.
"""

from __future__ import annotations

import json
from typing import Any

from . import keys
from .connection import as_text
from .payload import parse_json

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


#: Compact JSON that never raises on a float (payload.JSON_ENCODER refuses NaN, rightly for
#: jobs): a heartbeat must not fail over a metric.
_DURATIONS_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode_durations(histogram: dict[str, Any]) -> str:
    """One class's histogram ``{"buckets", "sum", "count"}`` as the JSON the heartbeat writes."""
    return _DURATIONS_ENCODER.encode(histogram)


def decode_durations(raw: bytes | str) -> tuple[dict[float, int], float | None, int | None] | None:
    """(bucket counts by upper bound, sum, count) of one stored histogram; None for a garbled one.
    Malformed buckets are skipped, a malformed sum or count is None (hostile writers exist)."""
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
    return buckets, float(total) if isinstance(total, (int, float)) else None, count if isinstance(count, int) else None
