"""Read-only views of one job as stored in Redis: ``JobRecord`` (a queue entry) and
``SortedEntry`` (a schedule/retry/dead entry with its score), plus ``Page``.

A record keeps the raw bytes exactly as Redis returned them (``raw``): deleting or moving a job
always sends those bytes back (``LREM``/``ZREM`` compare bytes), never a re-serialization, which
could differ in key order, float format or escaping from what Ruby or an older version wrote.

Decoding is lenient, as Sidekiq's ``JobRecord#parse``: a member that is not a JSON object still
makes a record (``invalid`` is True, ``args`` holds the raw text) so the dashboard can show and
delete it. Backtraces are base64 of zlib-deflated JSON (Sidekiq 6+) or, in old payloads, a plain
JSON array; nothing is ever unmarshalled or evaluated. Everything meant for display
(``display_class``, ``display_args``, ``display_kwargs``, ``args_preview``) is redacted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..connection import as_bytes
from ..error_fields import UnreadableBacktrace, compress_backtrace, inflate_backtrace
from ..payload import Item, parse_json, timestamp_seconds
from ..redaction import redact

Entry = TypeVar("Entry")

#: Longest argument preview the dashboard and CLI show before cutting with an ellipsis.
ARGS_PREVIEW_MAX_CHARS = 200
#: Untrusted page numbers are capped so offsets stay within Redis's integer range.
MAX_PAGE_NUMBER = 1_000_000


def decode_backtrace(value: Any) -> list[str]:
    """Sidekiq's compressed backtrace (or an old plain list) as a list of lines."""
    if value is None or value is False:
        return []
    if isinstance(value, list):
        return [str(line) for line in value]
    if not isinstance(value, str):
        return [str(value)]
    try:
        lines = inflate_backtrace(value)
    except UnreadableBacktrace:  # display only: the job itself is untouched
        return ["(the backtrace could not be decoded)"]
    if not isinstance(lines, list):
        return [str(lines)]
    return [str(line) for line in lines]


def encode_backtrace(lines: Sequence[str]) -> str:
    """The inverse of decode_backtrace, as Sidekiq 6.4 writes it (tests and fixtures use it)."""
    return compress_backtrace(list(lines))


class JobRecord:
    """One job as stored in Redis, decoded leniently; ``raw`` is the exact stored bytes."""

    def __init__(self, raw: bytes | str, *, queue: str | None = None) -> None:
        self.raw: bytes = as_bytes(raw)
        self.invalid = False
        try:
            parsed = parse_json(self.raw)
        except ValueError:  # any bytes (nested 100,000 deep too): shown as invalid; delete still works on raw
            parsed = None
        if isinstance(parsed, dict):
            self.item: Item = parsed
        else:
            self.item = {}
            self.invalid = True
        self._queue = queue

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.klass} {self.jid}>"

    def get(self, name: str, default: Any = None) -> Any:
        return self.item.get(name, default)

    @property
    def text(self) -> str:
        """The raw payload as text (for the job page and substring search)."""
        return self.raw.decode("utf-8", errors="replace")

    @property
    def jid(self) -> str:
        value = self.item.get("jid")
        return value if isinstance(value, str) else ""

    @property
    def klass(self) -> str:
        value = self.item.get("class")
        return value if isinstance(value, str) else ""

    @property
    def queue(self) -> str:
        value = self._queue or self.item.get("queue")
        return value if isinstance(value, str) else ""

    @property
    def args(self) -> list[Any]:
        if self.invalid:
            return [self.text]
        value = self.item.get("args")
        return value if isinstance(value, list) else []

    @property
    def kwargs(self) -> dict[str, Any]:
        value = self.item.get("kwargs")
        return value if isinstance(value, dict) else {}

    @property
    def display_class(self) -> str:
        """The class a human knows: ``display_class``, ActiveJob's ``wrapped``, else ``class``."""
        for key in ("display_class", "wrapped"):
            value = self.item.get(key)
            if isinstance(value, str) and value:
                return value
        return self.klass or ("(invalid job)" if self.invalid else "(no class)")

    @property
    def display_args(self) -> list[Any]:
        """Arguments with secret-keyed values replaced; an ``encrypt``-ed last argument hidden."""
        args = list(self.args)
        if self.item.get("encrypt") and args:
            args[-1] = "[encrypted data]"
        if self.item.get("class") == "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper" and args:
            first = args[0]
            if isinstance(first, dict) and isinstance(first.get("arguments"), list):
                args = first["arguments"]
        return redact(args)

    @property
    def display_kwargs(self) -> dict[str, Any]:
        return redact(self.kwargs)

    def args_preview(self, max_chars: int = ARGS_PREVIEW_MAX_CHARS) -> str:
        """Redacted arguments (and keyword arguments) as one line of JSON, cut to ``max_chars``."""
        text = ", ".join(json.dumps(arg, ensure_ascii=False, default=str) for arg in self.display_args)
        kwargs = self.display_kwargs
        if kwargs:
            keyword_text = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False, default=str)}" for key, value in kwargs.items())
            text = f"{text}, {keyword_text}" if text else keyword_text
        if len(text) > max_chars:
            return text[: max(max_chars - 1, 0)] + "…"
        return text

    @property
    def display_item(self) -> Item:
        """The whole payload, redacted, with the backtrace decoded: what the job page shows."""
        item = dict(self.item)
        if "args" in item or self.invalid:
            item["args"] = self.display_args
        if "kwargs" in item:
            item["kwargs"] = self.display_kwargs
        if "error_backtrace" in item:
            item["error_backtrace"] = self.error_backtrace
        return redact(item)

    @property
    def enqueued_at(self) -> float | None:
        return timestamp_seconds(self.item.get("enqueued_at"))

    @property
    def created_at(self) -> float | None:
        return timestamp_seconds(self.item.get("created_at")) or self.enqueued_at

    @property
    def failed_at(self) -> float | None:
        return timestamp_seconds(self.item.get("failed_at"))

    @property
    def retried_at(self) -> float | None:
        return timestamp_seconds(self.item.get("retried_at"))

    @property
    def retry_count(self) -> int | None:
        value = self.item.get("retry_count")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def error_class(self) -> str:
        value = self.item.get("error_class")
        return value if isinstance(value, str) else ""

    @property
    def error_message(self) -> str:
        value = self.item.get("error_message")
        return value if isinstance(value, str) else ("" if value is None else str(value))

    @property
    def error_backtrace(self) -> list[str]:
        return decode_backtrace(self.item.get("error_backtrace"))

    @property
    def tags(self) -> list[str]:
        value = self.item.get("tags")
        return [str(tag) for tag in value] if isinstance(value, list) else []

    def latency(self, *, now: float | None = None) -> float:
        """Seconds since the job was enqueued (or created); 0 when it carries no time."""
        current = time.time() if now is None else now
        since = self.enqueued_at or self.created_at
        return max(current - since, 0.0) if since else 0.0

    def searchable_text(self) -> str:
        """What a substring filter may match: never a redacted value, so search is no oracle."""
        parts = [self.jid, self.display_class, self.klass, self.queue, self.error_class, self.error_message]
        parts.append(json.dumps(self.display_args, ensure_ascii=False, default=str))
        if self.kwargs:
            parts.append(json.dumps(self.display_kwargs, ensure_ascii=False, default=str))
        parts.extend(self.tags)
        return "\n".join(parts)


class SortedEntry(JobRecord):
    """A job in ``schedule``, ``retry`` or ``dead``, with its score and the set's key."""

    def __init__(self, raw: bytes | str, score: float, *, set_name: str) -> None:
        super().__init__(raw)
        self.score = float(score)
        self.set_name = set_name

    @property
    def at(self) -> float:
        """The score as epoch seconds: run-at, next attempt or time of death."""
        return self.score

    @property
    def key(self) -> str:
        """``<score>-<jid>``: how forms name an entry (as Sidekiq's Web UI does)."""
        return f"{self.score!r}-{self.jid}"


def parse_entry_key(key: str) -> tuple[float, str] | None:
    """The score and jid of an entry key, or None when the key is not well formed."""
    score_text, separator, jid = key.partition("-")
    if not separator:
        return None
    try:
        score = float(score_text)
    except ValueError:
        return None
    if score != score or score in (float("inf"), float("-inf")):
        return None
    return score, jid


@dataclass(frozen=True)
class Page(Generic[Entry]):
    """One page of a listing: entries, the total the listing would have, and where we are."""

    entries: list[Entry]
    total: int
    number: int
    per_page: int

    @property
    def page_count(self) -> int:
        return max((self.total + self.per_page - 1) // self.per_page, 1)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.page_count


def clamp_page(number: Any, per_page: Any, *, max_per_page: int = 500) -> tuple[int, int]:
    """A page number >= 1 and a page size in 1..max_per_page from untrusted input."""
    try:
        page_number = int(number)
    except (TypeError, ValueError):
        page_number = 1
    try:
        size = int(per_page)
    except (TypeError, ValueError):
        size = 25
    return min(max(page_number, 1), MAX_PAGE_NUMBER), min(max(size, 1), max_per_page)
