"""The error fields of a failed job's payload (docs/payload.md): ``error_message``,
``error_class`` and the ``error_backtrace`` codec, one place for the worker that writes them
(``retry``, ``processor``, ``results``) and the API that reads them (``api.records``).

Sidekiq 6+ stores a failed job's backtrace as base64 (Ruby's ``encode64``: 60-column lines) of
zlib-deflated compact JSON, an array of Ruby-style lines (``path:line:in `name'``); Sidekiq before
6 stored the plain JSON array. A Python job whose payload has no ``backtrace`` option gets a
compact one (Sidekiq would store none): its innermost ``DEFAULT_BACKTRACE_FRAMES`` frames, each
line cut to ``BACKTRACE_LINE_MAX_CHARS`` (keeping its end: file, line, function), so the
dashboard's failed-job page shows where it failed for a few hundred bytes per failure
(docs/benchmarks.md). Frames are read from the traceback's frames, never from source files.
Reading is bounded: a hostile entry of a megabyte could otherwise
inflate to a gigabyte in every page that lists it, so inflating past
``BACKTRACE_MAX_INFLATED_BYTES`` is refused. Nothing is ever unmarshalled or evaluated.

No thread of its own and no Redis: pure functions.
"""

from __future__ import annotations

import base64
import binascii
import traceback
import zlib
from typing import Any

from .payload import compact_json, parse_json

#: The most a stored backtrace may inflate to when read.
BACKTRACE_MAX_INFLATED_BYTES = 1_000_000
#: How many frames (innermost first) a failure stores when its payload has no ``backtrace`` option.
DEFAULT_BACKTRACE_FRAMES = 20
#: The longest line of a default backtrace; a longer one keeps its end, after an ellipsis.
BACKTRACE_LINE_MAX_CHARS = 300


def safe_message(exception: BaseException) -> str:
    """The exception's message, its class name when empty (Ruby's habit), or a placeholder when
    its ``__str__`` itself fails: a broken exception must not break failure handling."""
    try:
        text = str(exception)
    except Exception:  # noqa: BLE001  # a user-defined __str__ that raises: the job still gets filed
        return f"{type(exception).__name__} (its message could not be rendered)"
    return text or type(exception).__name__


def exception_class_name(exception: BaseException) -> str:
    kind = type(exception)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


class UnreadableBacktrace(ValueError):
    """A string ``error_backtrace`` that is not base64 of zlib-deflated JSON, or inflates too far."""


def backtrace_lines(exception: BaseException, *, limit: int | None = None, line_max_chars: int | None = None) -> list[str]:
    """Ruby-style lines (``path:line:in `name'``), innermost first, so Sidekiq's Web UI shows them
    as it would its own: the innermost ``limit`` frames (all when None), each line cut to
    ``line_max_chars`` from the left (none when None)."""
    frames = [(frame.f_code.co_filename, line, frame.f_code.co_name) for frame, line in traceback.walk_tb(exception.__traceback__)]
    if limit is not None:
        frames = frames[-limit:] if limit > 0 else []
    lines = [f"{filename}:{line}:in `{name}'" for filename, line, name in reversed(frames)]
    if line_max_chars is not None:
        lines = [line if len(line) <= line_max_chars else "…" + line[len(line) - line_max_chars + 1 :] for line in lines]
    return lines


def compress_backtrace(lines: list[str]) -> str:
    """Base64 (with Ruby's 60-column newlines) of zlib-deflated JSON, as Sidekiq 6.4 writes it."""
    return base64.encodebytes(zlib.compress(compact_json(list(lines)).encode("utf-8"))).decode("ascii")


def inflate_backtrace(value: str) -> Any:
    """Decode base64 + zlib + JSON; UnreadableBacktrace when it is none, or inflates past
    BACKTRACE_MAX_INFLATED_BYTES."""
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(base64.b64decode(value), BACKTRACE_MAX_INFLATED_BYTES)
        if inflater.unconsumed_tail:
            raise UnreadableBacktrace(f"the backtrace inflates past {BACKTRACE_MAX_INFLATED_BYTES} bytes")
        return parse_json(data)
    except (binascii.Error, zlib.error, ValueError) as error:  # UnreadableBacktrace is a ValueError too
        if isinstance(error, UnreadableBacktrace):
            raise
        raise UnreadableBacktrace(str(error)) from error


def decompress_backtrace(value: Any) -> list[str]:
    """The lines of an ``error_backtrace`` field (compressed, or a plain list from old Sidekiqs);
    none for anything unreadable (a worker never fails over a backtrace)."""
    if isinstance(value, list):
        return [str(line) for line in value]
    if not isinstance(value, str) or not value:
        return []
    try:
        lines = inflate_backtrace(value)
    except UnreadableBacktrace:  # unreadable or oversized backtrace: none rather than a failure
        return []
    return [str(line) for line in lines] if isinstance(lines, list) else []
