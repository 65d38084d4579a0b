"""``ScheduledSet``, ``RetrySet``, ``DeadSet``: the three ZSETs of jobs waiting for a time, as
Sidekiq's ``JobSet`` subclasses.

Reading: ``page`` (by rank, with ZCARD, in one pipeline), ``search`` (filters by class and by a
case-insensitive substring over the *redacted* display text, so a search can never probe secret
values, examining at most FILTER_SCAN_BUDGET entries per call), ``matching`` (the same filters
over the whole set, for bulk actions), ``find_job`` (ZSCAN MATCH on the jid), ``get``/``get_many`` by the ``<score>-<jid>`` keys
the dashboard's forms carry.

Acting: every move is one Lua script keyed on the member's raw bytes, so it happens exactly once
even when two operators (or an operator and the scheduler) act on the same job together.
``retry`` and ``add_to_queue`` (``lua/api_move_to_queue.lua``) ZREM the member and LPUSH it to
its queue with a fresh ``enqueued_at``; ``retry`` also lowers ``retry_count`` by one, as Sidekiq's
``SortedEntry#retry``, so a manual retry does not use up an attempt. ``kill``
(``lua/api_kill.lua``) moves the raw member to ``dead`` and trims the dead set in the same script.
``delete`` is a ZREM of the raw member. Bulk actions walk the set in chunks and pipeline one
script call per job. A member that is not valid JSON cannot be pushed to a queue (its queue is
unknown): it is skipped by retry and can still be deleted or killed.

Every job an action took goes through the "job ended" door (``endings``): deleted from the
schedule or the retry set (or cleared with it) it ends ``DELETED``, killed it ends ``DEAD``
(reason ``operator_killed``), moved to its queue it is put back (``on_requeue``). A dead job has
ended already: deleting it, or clearing the dead set, tells no one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from .. import keys, scripts
from ..conf import jobs_settings
from ..connection import get_redis
from ..ending import Fate, may_hear
from ..outcomes import DeadReason
from ..payload import compact_json
from .endings import ended, moved_to_queue
from .guard import translate_errors
from .records import Page, SortedEntry, clamp_page, parse_entry_key

#: Members read per round trip when walking a whole set.
SCAN_CHUNK = 500
#: Entries one filtered listing examines (the dashboard's ``?q=`` and ``?class=``, ``jobs ...
#: --grep``): a filter over 200,000 dead jobs answers in a fraction of a second and offers to
#: look further ("more") instead of decoding the whole set in one request.
FILTER_SCAN_BUDGET = 10_000


@dataclass(frozen=True)
class SearchPage:
    """Matching entries found in one window of a set (in display order), and where to go on."""

    entries: list[SortedEntry]
    start_rank: int  # the window's first rank (0-based, display order)
    end_rank: int  # one past the last rank examined
    size: int  # entries in the set when it was read

    @property
    def next_rank(self) -> int | None:
        """Where a "more" request starts, or None when the window reached the end of the set."""
        return self.end_rank if self.end_rank < self.size else None


def _glob_escape(text: str) -> str:
    return "".join("\\" + character if character in "*?[]\\" else character for character in text)


def _dump(item: Any) -> str:
    return compact_json(item, allow_nan=True)  # another client's job: re-encoded as it is


def queue_payload(entry: SortedEntry, *, now: float, lower_retry_count: bool) -> tuple[str, str] | None:
    """The queue name and JSON to push for ``entry``; None when it cannot go to a queue."""
    if entry.invalid or not entry.klass:
        return None
    item = dict(entry.item)
    item.pop("at", None)
    queue = item.get("queue")
    if not isinstance(queue, str) or not queue:
        queue = jobs_settings.DEFAULT_QUEUE
        item["queue"] = queue
    if lower_retry_count and isinstance(item.get("retry_count"), int) and not isinstance(item["retry_count"], bool):
        item["retry_count"] -= 1
    item["enqueued_at"] = now
    return queue, _dump(item)


class JobSet:
    """A sorted set of jobs; subclasses fix the key and the display order."""

    #: The ``jobsapp.keys`` name of the set's key, read at each use (in cluster mode it carries
    #: the hash tag of the settings in force).
    key_name: str = ""
    #: Dead jobs are listed most recent first; scheduled and retries soonest first.
    newest_first = False
    #: Whether ``kill`` makes sense here (not for the dead set itself).
    can_kill = True
    #: Whether removing an entry ends its job (not in the dead set: a dead job has ended already).
    removal_ends_job = True

    @property
    def name(self) -> str:
        """The set's key: ``schedule``, ``retry`` or ``dead`` (behind a hash tag in cluster mode)."""
        return str(getattr(keys, self.key_name))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def _entry(self, raw: Any, score: Any) -> SortedEntry:
        return SortedEntry(raw, float(score), set_name=self.name)

    def _entries(self, members: Any) -> list[SortedEntry]:
        """Entries from a ``withscores=True`` reply: (raw, score) pairs."""
        return [self._entry(raw, score) for raw, score in members]

    def _zscan(self, match: str | None) -> Iterator[SortedEntry]:
        for raw, score in get_redis().zscan_iter(self.name, match=match, count=SCAN_CHUNK):
            yield self._entry(raw, score)

    # --- reading ------------------------------------------------------------------------

    @translate_errors
    def size(self) -> int:
        return int(get_redis().zcard(self.name))

    @translate_errors
    def page(
        self, number: int = 1, per_page: int = 25, *, class_name: str | None = None, substring: str | None = None
    ) -> Page[SortedEntry]:
        """One page in display order; with filters, of the matching entries only."""
        number, per_page = clamp_page(number, per_page)
        start = (number - 1) * per_page
        if class_name or substring:
            matches = self.matching(class_name=class_name, substring=substring)
            return Page(matches[start : start + per_page], len(matches), number, per_page)
        pipe = get_redis().pipeline(transaction=False)
        pipe.zcard(self.name)
        if self.newest_first:
            pipe.zrevrange(self.name, start, start + per_page - 1, withscores=True)
        else:
            pipe.zrange(self.name, start, start + per_page - 1, withscores=True)
        total, members = pipe.execute()
        return Page(self._entries(members), int(total), number, per_page)

    @staticmethod
    def _matches(entry: SortedEntry, class_name: str | None, needle: str | None) -> bool:
        if class_name and class_name not in (entry.klass, entry.display_class):
            return False
        return not needle or needle in entry.searchable_text().casefold()

    @translate_errors
    def search(
        self,
        *,
        class_name: str | None = None,
        substring: str | None = None,
        start_rank: int = 0,
        limit: int = 25,
        budget: int = FILTER_SCAN_BUDGET,
    ) -> SearchPage:
        """Up to ``limit`` entries matching the filters (as ``matching``), in display order,
        examining at most ``budget`` entries from ``start_rank``: bounded work per request
        whatever the set's size. ``next_rank`` says where to continue."""
        connection = get_redis()
        size = int(connection.zcard(self.name))
        rank = start_rank = min(max(int(start_rank), 0), size)
        end = min(size, rank + max(int(budget), 1))
        needle = substring.casefold() if substring else None
        found: list[SortedEntry] = []
        read = connection.zrevrange if self.newest_first else connection.zrange
        while rank < end and len(found) < limit:
            members = cast("list[tuple[bytes, float]]", read(self.name, rank, min(rank + SCAN_CHUNK, end) - 1, withscores=True))
            if not members:
                break
            for raw, score in members:
                rank += 1
                entry = self._entry(raw, score)
                if self._matches(entry, class_name, needle):
                    found.append(entry)
                    if len(found) >= limit:
                        break
        return SearchPage(found, start_rank, rank, size)

    @translate_errors
    def matching(self, *, class_name: str | None = None, substring: str | None = None) -> list[SortedEntry]:
        """Entries whose class (or display class) is ``class_name`` and whose redacted display
        text contains ``substring`` (ignoring case), in display order. O(set size)."""
        match = None
        if class_name and _dump(class_name)[1:-1] == class_name:
            match = f"*{_glob_escape(class_name)}*"
        needle = substring.casefold() if substring else None
        found = []
        for entry in self._zscan(match):
            if self._matches(entry, class_name, needle):
                found.append(entry)
        found.sort(key=lambda entry: entry.score, reverse=self.newest_first)
        return found

    def scan(self) -> Iterator[SortedEntry]:
        """Every entry in score order, SCAN_CHUNK per round trip (a snapshot per chunk)."""
        read_chunk = translate_errors(get_redis().zrange)
        start = 0
        while True:
            members = read_chunk(self.name, start, start + SCAN_CHUNK - 1, withscores=True)
            if not members:
                return
            yield from self._entries(members)
            start += SCAN_CHUNK

    def __iter__(self) -> Iterator[SortedEntry]:
        return self.scan()

    @translate_errors
    def find_job(self, jid: str) -> SortedEntry | None:
        """The entry with this jid, or None (ZSCAN MATCH on the jid: O(set size) on the server)."""
        if not jid:
            return None
        for entry in self._zscan(f"*{_glob_escape(jid)}*"):
            if entry.jid == jid:
                return entry
        return None

    @translate_errors
    def fetch(self, score: float, jid: str | None = None) -> list[SortedEntry]:
        """Entries with exactly this score (and this jid, when given)."""
        members = get_redis().zrangebyscore(self.name, score, score, withscores=True)
        entries = self._entries(members)
        return [entry for entry in entries if jid is None or entry.jid == jid]

    def get(self, key: str) -> SortedEntry | None:
        """The entry a ``<score>-<jid>`` key names, or None (gone, or a malformed key)."""
        found = self.get_many([key])
        return found[0] if found else None

    @translate_errors
    def get_many(self, entry_keys: Iterable[str]) -> list[SortedEntry]:
        """The entries these keys name, in one round trip; missing and malformed keys are skipped."""
        wanted = [parsed for parsed in (parse_entry_key(str(key)) for key in entry_keys) if parsed]
        if not wanted:
            return []
        pipe = get_redis().pipeline(transaction=False)
        for score, _ in wanted:
            pipe.zrangebyscore(self.name, score, score, withscores=True)
        found: dict[bytes, SortedEntry] = {}
        for (_, jid), members in zip(wanted, pipe.execute(), strict=True):
            for entry in self._entries(members):
                if entry.jid == jid:
                    found.setdefault(entry.raw, entry)
        return list(found.values())

    # --- acting on one entry ------------------------------------------------------------

    def delete(self, entry: SortedEntry, *, fate: Fate = Fate.DELETED) -> bool:
        """Remove the entry; False when it was already gone. Out of the schedule or the retry
        set, its job has ended with ``fate`` (``REVOKED`` for Celery's revoke)."""
        return self._delete_many([entry], fate=fate) == 1

    def retry(self, entry: SortedEntry, *, now: float | None = None) -> bool:
        """Push to its queue now, lowering retry_count by one (Sidekiq's "Retry Now")."""
        return self._move_many([entry], lower_retry_count=True, now=now) == 1

    def add_to_queue(self, entry: SortedEntry, *, now: float | None = None) -> bool:
        """Push to its queue now, unchanged apart from enqueued_at (Sidekiq's "Add to queue")."""
        return self._move_many([entry], lower_retry_count=False, now=now) == 1

    def kill(self, entry: SortedEntry, *, now: float | None = None) -> bool:
        """Move to the dead set (trimmed in the same script); False when it was already gone."""
        return self._kill_many([entry], now=now) == 1

    # --- acting on many -----------------------------------------------------------------

    def apply(self, action: str, entries: Iterable[SortedEntry], *, now: float | None = None) -> int:
        """Run ``action`` ("retry", "add_to_queue", "kill", "delete") on entries; returns how many
        were acted on (entries another actor moved first are not counted)."""
        batch = list(entries)
        if action == "retry":
            return self._move_many(batch, lower_retry_count=True, now=now)
        if action == "add_to_queue":
            return self._move_many(batch, lower_retry_count=False, now=now)
        if action == "kill":
            return self._kill_many(batch, now=now)
        if action == "delete":
            return self._delete_many(batch)
        raise ValueError(f"unknown action {action!r}")

    def retry_all(self, *, class_name: str | None = None, substring: str | None = None) -> int:
        return self._apply_all("retry", class_name=class_name, substring=substring)

    def add_all_to_queue(self, *, class_name: str | None = None, substring: str | None = None) -> int:
        return self._apply_all("add_to_queue", class_name=class_name, substring=substring)

    def kill_all(self, *, class_name: str | None = None, substring: str | None = None) -> int:
        return self._apply_all("kill", class_name=class_name, substring=substring)

    def delete_all(self, *, class_name: str | None = None, substring: str | None = None) -> int:
        """Delete matching entries; without filters this is ``clear``."""
        if not class_name and not substring:
            return self.clear()
        return self._apply_all("delete", class_name=class_name, substring=substring)

    @translate_errors
    def clear(self) -> int:
        """Drop the whole set; returns how many entries it dropped. Out of the schedule or the
        retry set, the entries are taken SCAN_CHUNK per ``ZPOPMIN`` (as many as the set held when
        the clear began) and each job ends ``DELETED`` through the door."""
        client = get_redis()
        if not self.removal_ends_job:
            pipe = client.pipeline(transaction=True)
            pipe.zcard(self.name)
            pipe.unlink(self.name)
            size, _ = pipe.execute()
            return int(size)
        remaining = int(client.zcard(self.name))
        dropped = 0
        while remaining > 0:
            members = cast("list[tuple[bytes, float]]", client.zpopmin(self.name, min(SCAN_CHUNK, remaining)))
            if not members:
                break  # the scheduler moved the rest
            dropped += len(members)
            remaining -= len(members)
            ended(client, self._entries([(raw, score) for raw, score in members if may_hear(raw)]), Fate.DELETED)
        return dropped

    def _apply_all(self, action: str, *, class_name: str | None, substring: str | None) -> int:
        if class_name or substring:
            matches = self.matching(class_name=class_name, substring=substring)
            return sum(self.apply(action, matches[start : start + SCAN_CHUNK]) for start in range(0, len(matches), SCAN_CHUNK))
        read_chunk = translate_errors(get_redis().zrange)
        done = 0
        skipped = 0
        while True:
            members = read_chunk(self.name, skipped, skipped + SCAN_CHUNK - 1, withscores=True)
            if not members:
                return done
            acted = self.apply(action, self._entries(members))
            done += acted
            # Entries that could not move (invalid JSON) stay ahead of the next chunk.
            skipped += len(members) - acted

    @translate_errors
    def _move_many(self, entries: list[SortedEntry], *, lower_retry_count: bool, now: float | None) -> int:
        current = time.time() if now is None else now
        pipe = get_redis().pipeline(transaction=False)
        sent: list[SortedEntry] = []
        for entry in entries:
            target = queue_payload(entry, now=current, lower_retry_count=lower_retry_count)
            if target is None:
                continue
            queue, data = target
            scripts.api_move_to_queue(pipe, set_key=self.name, member=entry.raw, queue=queue, data=data)
            sent.append(entry)
        if not sent:
            return 0
        moved = [entry for entry, reply in zip(sent, pipe.execute(), strict=True) if scripts.moved_reply(reply)]
        moved_to_queue(moved)
        return len(moved)

    @translate_errors
    def _kill_many(self, entries: list[SortedEntry], *, now: float | None) -> int:
        if not self.can_kill:
            raise ValueError(f"jobs in {self.name!r} cannot be killed")
        if not entries:
            return 0
        current = time.time() if now is None else now
        oldest_kept = current - float(jobs_settings.DEAD_TIMEOUT_SECONDS)
        max_jobs = int(jobs_settings.DEAD_MAX_JOBS)
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        for entry in entries:
            scripts.api_kill(pipe, set_key=self.name, member=entry.raw, now=current, oldest_kept=oldest_kept, dead_max_jobs=max_jobs)
        killed = [entry for entry, reply in zip(entries, pipe.execute(), strict=True) if scripts.moved_reply(reply)]
        ended(client, killed, Fate.DEAD, reason=DeadReason.OPERATOR_KILLED, death_handlers=True)
        return len(killed)

    @translate_errors
    def _delete_many(self, entries: list[SortedEntry], *, fate: Fate = Fate.DELETED) -> int:
        if not entries:
            return 0
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        for entry in entries:
            pipe.zrem(self.name, entry.raw)
        removed = [entry for entry, reply in zip(entries, pipe.execute(), strict=True) if reply]
        if self.removal_ends_job:
            ended(client, removed, fate)
        return len(removed)


class ScheduledSet(JobSet):
    """``schedule``: jobs waiting for their run-at time (score)."""

    key_name = "SCHEDULE"


class RetrySet(JobSet):
    """``retry``: failed jobs waiting for their next attempt (score)."""

    key_name = "RETRY"


class DeadSet(JobSet):
    """``dead``: jobs out of retries, killed, or poison; score = time of death."""

    key_name = "DEAD"
    newest_first = True
    can_kill = False
    removal_ends_job = False


SETS: dict[str, Callable[[], JobSet]] = {"scheduled": ScheduledSet, "retries": RetrySet, "dead": DeadSet}
