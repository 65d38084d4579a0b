"""The JSON codec of the hot paths: orjson (C) where its answer is the standard library's, the
standard library everywhere else.

Any thread calls it: the processor threads decode each job they run, producers encode each job
they push. No Redis key is touched here; a value this module cannot encode or decode raises the
standard library's own error, so the caller's handling (a push refused, a payload filed dead as
malformed) is unchanged.

Why: decoding a job with ``json.loads`` and encoding one with ``json.JSONEncoder`` cost a few
microseconds of Python each, a visible share of a short job's CPU; orjson does both in about a
microsecond. What stays the same, byte for byte, is what Sidekiq reads and writes: compact
separators, non-ASCII text as UTF-8 (Ruby's ``JSON.generate``), "/" not escaped, keys in insertion
order. orjson's output differs from the standard encoder's only in the spelling of a float with an
exponent (``1e-7``, where Python writes ``1e-07``; both are JSON, and Ruby spells it ``1.0e-07``).

- ``dumps_compact``: orjson for values made of ``None``, ``bool``, ``int`` (64 bits), ``float``,
  ``str``, ``list`` and ``dict`` with ``str`` keys. Anything else orjson refuses (a subclass, a big
  integer, a lone surrogate) and any output holding ``null`` (orjson's spelling of NaN and
  Infinity) is encoded again by the standard encoder, which accepts it or raises as it always
  did. orjson also writes UUIDs and enums, which the standard encoder refuses: the caller passes
  values ``payload.check_json_native`` has checked (``payload.encode``). Sorted keys (hashed by
  unique.py) stay on the standard encoder for stable digests.
- ``loads``: orjson first; whatever it refuses (invalid JSON, a number beyond a double, a lone
  surrogate escape, nesting past 1,024 levels) is parsed again by ``json.loads``, so the result
  or the error is the standard library's. Text with 19 digits in a row goes to ``json.loads``
  straight away: orjson reads an integer past 64 bits as a float instead of refusing it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

#: orjson leaves subclasses of str, int, dict and list, dataclasses and datetimes to ``default``,
#: which has none: they fall back to the standard encoder (its behaviour, not orjson's).
_PASSTHROUGH = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME

_orjson_dumps = orjson.dumps
_orjson_loads = orjson.loads
_OrjsonEncodeError = orjson.JSONEncodeError
_OrjsonDecodeError = orjson.JSONDecodeError

#: 19 digits in a row: the text may hold an integer outside orjson's 64 bits (it reads
#: -9223372036854775809 and 18446744073709551616 as floats, where json.loads keeps every digit).
#: (Every digit read as "0", then one search: a few hundred nanoseconds, where a regular
#: expression took longer than the parse.)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def dumps_compact(value: Any, fallback: Callable[[Any], str]) -> bytes:
    """``value`` as compact UTF-8 JSON; ``fallback(value)`` (the standard encoder's ``encode``)
    decides what orjson would not write exactly as the standard library does: any type it refuses,
    and any output holding ``null``, which is how orjson writes NaN and Infinity (the standard
    encoder refuses them, or writes the same bytes when the nulls were ``None``)."""
    try:
        data = _orjson_dumps(value, option=_PASSTHROUGH)
    except _OrjsonEncodeError:  # a type or value orjson refuses: the standard encoder decides
        return fallback(value).encode("utf-8")
    if data.find(b"null") != -1:  # not ``in``: bytes.__contains__ first tries the operand as an int (a raised TypeError)
        return fallback(value).encode("utf-8")
    return data


def loads(raw: bytes | str) -> Any:
    """``json.loads(raw)``, the same value or the same error, at orjson's speed for valid JSON."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    if data.translate(_DIGITS_AS_ZERO).find(_LONG_DIGITS) != -1:
        return json.loads(raw)  # maybe an integer past 64 bits, which orjson would read as a float
    try:
        return _orjson_loads(raw)
    except _OrjsonDecodeError:  # orjson refuses more than the standard parser: it decides
        return json.loads(raw)
