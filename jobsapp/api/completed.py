"""Finished retained jobs (``sidekiq_options(retain=seconds)``): the dashboard's Completed page
and ``manage.py jobs results`` read them here.

The index is the ``keys.RESULTS`` ZSET (jid scored by its record's expiry time); each record is
the ``keys.result(jid)`` HASH written by ``jobsapp.results``. Listing reads one page of the index
and that page's records in one pipeline; members whose record has expired are skipped and
trimmed. Read-only apart from that trim and ``forget``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import keys
from ..connection import get_redis
from ..payload import now
from ..results import JobResult, _decode
from ..results import forget as forget_result
from ..results import get as get_result
from .guard import translate_errors
from .records import Page, clamp_page

if TYPE_CHECKING:
    import redis


class CompletedSet:
    """Succeeded and failed jobs whose results are retained, soonest to expire last (newest first)."""

    name = "completed"

    @translate_errors
    def size(self) -> int:
        """Members not yet expired."""
        return int(get_redis().zcount(keys.RESULTS, f"({now()}", "+inf"))

    @translate_errors
    def page(self, number: int | str = 1, per_page: int = 25, *, status: str | None = None) -> Page[JobResult]:
        """One page, newest first; ``status`` ("succeeded" or "failed") filters (O(set size))."""
        number, per_page = clamp_page(number, per_page)
        start = (number - 1) * per_page
        connection = get_redis()
        timestamp = now()
        connection.zremrangebyscore(keys.RESULTS, "-inf", timestamp)
        if status:
            everything = self._read(connection, list(connection.zrevrange(keys.RESULTS, 0, -1)))
            matching = [result for result in everything if result.status == status]
            return Page(matching[start : start + per_page], len(matching), number, per_page)
        pipe = connection.pipeline(transaction=False)
        pipe.zcard(keys.RESULTS)
        pipe.zrevrange(keys.RESULTS, start, start + per_page - 1)
        total, members = pipe.execute()
        return Page(self._read(connection, members), int(total), number, per_page)

    @staticmethod
    def _read(connection: redis.Redis, members: list[Any]) -> list[JobResult]:
        pipe = connection.pipeline(transaction=False)
        for member in members:
            pipe.hgetall(keys.result(member.decode() if isinstance(member, bytes) else member))
        return [JobResult.from_fields(_decode(raw)) for raw in pipe.execute() if raw]

    @staticmethod
    def get(jid: str) -> JobResult | None:
        """One job's record, finished or not (RedisUnavailable when Redis does not answer)."""
        return get_result(jid)

    @staticmethod
    def forget(jid: str) -> bool:
        """Delete one job's record now; True when there was one."""
        return forget_result(jid)
