"""sidekiq-cron 1.8's wire format, shared by the periodic scheduler (``periodic``: writes and
ticks) and the operators' API (``api.periodic``: reads and edits) without either importing the
other: tick arithmetic, the Ruby time format of its hash fields, the jid history's length, the
Redis server's clock. Keys are in ``keys.py`` (``CRON_JOBS``, ``cron_job:<name>``...); the layout
is in docs/redis-layout.md.

No thread of its own: pure functions, plus ``server_time`` (one TIME round trip on the caller's
connection).
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

#: Entries of ``cron_job:<name>:jid_history`` kept (sidekiq-cron's default).
JID_HISTORY_SIZE = 10
#: How sidekiq-cron writes times into its hashes (``last_enqueue_time``...).
RUBY_TIME_FORMAT = "%Y-%m-%d %H:%M:%S +0000"


def _croniter() -> Any:
    """croniter's class, imported at first use: with dateutil it adds ~9 ms to every worker's
    start-up (``python -X importtime``, bytecode cached, 2-core CI machine), and a worker without
    cron entries never needs it."""
    from croniter import croniter

    return croniter


def is_valid(cron: str) -> bool:
    """Whether ``cron`` is a cron expression: 5 fields, or 6 with seconds first. An expression no
    date matches (30 February) is valid here; asking it for a tick raises ValueError."""
    fields = len(cron.split())
    return fields <= 6 and bool(_croniter().is_valid(cron, second_at_beginning=fields == 6))


def _cron_iterator(epoch_seconds: float, cron: str, timezone: str) -> Any:
    start = dt.datetime.fromtimestamp(epoch_seconds, zoneinfo.ZoneInfo(timezone))
    return _croniter()(cron, start, second_at_beginning=len(cron.split()) == 6)


def previous_tick(epoch_seconds: float, *, cron: str | None, every_seconds: int | None, timezone: str = "UTC") -> int:
    """The latest tick at or before ``epoch_seconds``: ``every`` ticks are aligned on the epoch
    (every 60 s ticks at :00 of each minute, on every host alike); cron ticks in ``timezone``."""
    if every_seconds:
        return int(epoch_seconds // every_seconds) * every_seconds
    if cron is None:
        raise ValueError("a schedule needs cron or every_seconds")
    return int(_cron_iterator(epoch_seconds, cron, timezone).get_prev(float))


def next_tick(epoch_seconds: float, *, cron: str | None, every_seconds: int | None, timezone: str = "UTC") -> int:
    """The first tick strictly after ``epoch_seconds``."""
    if every_seconds:
        return previous_tick(epoch_seconds, cron=None, every_seconds=every_seconds) + every_seconds
    if cron is None:
        raise ValueError("a schedule needs cron or every_seconds")
    return int(_cron_iterator(epoch_seconds, cron, timezone).get_next(float))


def server_time(client: redis.Redis) -> float:
    """The Redis server's clock, in epoch seconds: every host ticks on it, never its own."""
    seconds, microseconds = client.time()
    return float(seconds) + float(microseconds) / 1_000_000
