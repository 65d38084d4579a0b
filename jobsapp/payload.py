"""The job payload: Sidekiq's JSON item (docs/payload.md), its validation and its encoding.

Pure functions, no Redis. The producing side calls ``normalize_item`` and ``encode``; the
consuming side calls ``decode``. Arguments must be JSON-native (None, bool, int, float that is
finite, str, list, dict with str keys): anything else raises TypeError naming the path of the
offending value, before anything is written, so a job never fails later on a value that changed
shape in transit (a tuple turning into a list, a datetime turning into a string).
"""

from __future__ import annotations

import json
import math
import secrets
import time
from typing import Any

from . import codec
from .conf import jobs_settings
from .errors import MalformedPayload, PayloadTooLarge

#: A Sidekiq item: the decoded job payload (docs/payload.md). The one alias every module uses.
Item = dict[str, Any]

#: Extra payload key of a job put back from a dead process's in-flight list: how many dead
#: processes it has been in flight in. The worker runs such a job in quarantine (recovery.py).
RECOVERED_KEY = "jobsapp_recovered"

#: compact_json's encoders, by (allow_nan, sort_keys): built once, reused by every thread.
_ENCODERS = {
    (allow_nan, sort_keys): json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan, sort_keys=sort_keys)
    for allow_nan in (False, True)
    for sort_keys in (False, True)
}
_STRICT_ENCODE = _ENCODERS[False, False].encode


def compact_json(value: Any, *, allow_nan: bool = False, sort_keys: bool = False) -> str:
    """The one spelling of JSON the engine writes: Sidekiq's compact form (no spaces), non-ASCII
    text as it is. NaN and Infinity are refused (ValueError: they are not JSON, and Ruby's parser
    rejects them) unless ``allow_nan``, which only re-encodes what another client already wrote
    (a foreign job being filed in retry or dead must not fail on it) or a metric; ``sort_keys``
    for a canonical form that is hashed (unique.py)."""
    if not allow_nan and not sort_keys:
        return _STRICT_ENCODE(value)
    return _ENCODERS[allow_nan, sort_keys].encode(value)


def new_jid() -> str:
    """24 lowercase hex characters: 96 random bits, as Sidekiq's ``SecureRandom.hex(12)``."""
    return secrets.token_hex(12)


def now() -> float:
    return time.time()


def _type_name(value: object) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


#: Deepest nesting of lists and objects accepted in arguments: Ruby's JSON.parse refuses more
#: (its max_nesting), and Python would otherwise fail with a RecursionError.
MAX_NESTING = 100


def check_json_native(value: Any, path: str = "args", depth: int = 0, *, subject: str = "job arguments") -> None:
    """Raise TypeError naming the first value under ``path`` that JSON would not round-trip, or
    ValueError when lists and objects nest deeper than MAX_NESTING; ``subject`` is what the
    message says must be JSON-native ("job arguments", "return values")."""
    kind = type(value)
    if value is None or kind is str or kind is bool or kind is int:
        return
    if kind is float:
        if not math.isfinite(value):
            raise TypeError(f"{path} is {value!r}, which is not valid JSON")
        return
    if (kind is list or kind is dict) and depth >= MAX_NESTING:
        raise ValueError(f"{path[:200]}... nests lists and objects deeper than {MAX_NESTING} levels, which Ruby's JSON refuses")
    if kind is list:
        for index, element in enumerate(value):
            check_json_native(element, f"{path}[{index}]", depth + 1, subject=subject)
        return
    if kind is dict:
        for key, element in value.items():
            if type(key) is not str:
                raise TypeError(f"{path} has a key {key!r} of type {_type_name(key)}; JSON object keys are strings")
            check_json_native(element, f"{path}[{json.dumps(key)}]", depth + 1, subject=subject)
        return
    article = "an" if _type_name(value)[:1].lower() in "aeiou" else "a"
    raise TypeError(
        f"{path} is {article} {_type_name(value)}; {subject} must be JSON-native (None, bool, int, float, str, list, dict with str keys)"
    )


def normalize_item(item: Item, *, timestamp: float | None = None) -> Item:
    """Validate a raw item and fill in what Sidekiq's client fills in: jid, created_at, defaults.

    The caller's dict is not changed. Unknown keys are kept (they ride along every hop).
    """
    if not isinstance(item, dict):
        raise TypeError(f"a job item must be a dict, not {_type_name(item)}")
    job_class = item.get("class")
    if not isinstance(job_class, str) or not job_class:
        raise ValueError('a job item needs "class": a non-empty string naming the job')
    args = item.get("args", [])
    if type(args) is not list:
        raise TypeError(f'"args" must be a list, not {_type_name(args)}')
    check_json_native(args, "args")
    if "kwargs" in item:
        if type(item["kwargs"]) is not dict:
            raise TypeError(f'"kwargs" must be a dict, not {_type_name(item["kwargs"])}')
        check_json_native(item["kwargs"], "kwargs")
    queue = item.get("queue") or jobs_settings.DEFAULT_QUEUE
    if not isinstance(queue, str):
        raise TypeError(f'"queue" must be a string, not {_type_name(queue)}')
    retry = item.get("retry", True)
    if type(retry) not in (bool, int):
        raise TypeError(f'"retry" must be true, false or a number of retries, not {retry!r}')
    normalized = dict(item)
    normalized["args"] = args
    normalized["queue"] = queue
    normalized["retry"] = retry
    jid = normalized.get("jid")
    if not jid:
        normalized["jid"] = new_jid()
    elif not isinstance(jid, str):
        raise TypeError(f'"jid" must be a string, not {_type_name(jid)}')
    if "created_at" not in normalized:
        normalized["created_at"] = now() if timestamp is None else timestamp
    for key, value in normalized.items():
        if key not in ("args", "kwargs"):
            check_json_native(value, key)
    return normalized


def encode(item: Item) -> bytes:
    """Compact UTF-8 JSON; PayloadTooLarge past ``MAX_PAYLOAD_BYTES``."""
    data = codec.dumps_compact(item, _STRICT_ENCODE)  # its values were checked (normalize_item)
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    if limit and len(data) > limit:
        raise PayloadTooLarge(
            f"job {item.get('class')} ({item.get('jid')}) is {len(data)} bytes, over the {limit}-byte limit "
            "(JOBSAPP['MAX_PAYLOAD_BYTES']); pass an id and load the data in the job instead"
        )
    return data


def encode_unchecked(item: Item) -> bytes:
    """Compact UTF-8 JSON without the size limit: for a job already in Redis being moved."""
    return compact_json(item).encode("utf-8")


#: Deepest nesting of a whole stored job (the item, its args, then MAX_NESTING levels of
#: arguments): what our client and Ruby's JSON.parse accept. Anything deeper read from Redis is
#: malformed, so no later step (encoding it into the retry set, redaction, templates) can hit
#: Python's recursion limit on a job another client wrote.
MAX_STORED_NESTING = MAX_NESTING + 2


def _nesting_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether lists and objects in ``value`` nest deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        kind = type(current)
        if kind is list or kind is dict:
            if depth > limit:
                return True
            children = current if kind is list else current.values()
            stack.extend((child, depth + 1) for child in children if type(child) is list or type(child) is dict)
    return False


def parse_json(raw: bytes | str) -> Any:
    """``json.loads`` for text read from Redis, which any client may have written: ValueError
    (MalformedPayload) for anything that is not JSON nested at most MAX_STORED_NESTING deep,
    whatever the bytes (invalid UTF-8, a number of a million digits, JSON nested 100,000 deep,
    which makes ``json.loads`` raise RecursionError)."""
    try:
        value = codec.loads(raw)
    except (ValueError, UnicodeDecodeError, TypeError) as exc:  # the caller sends the raw text to the dead set
        raise MalformedPayload(f"not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:  # nested past the interpreter's limit: dead, never retried
        raise MalformedPayload(f"not valid JSON: nested deeper than {MAX_STORED_NESTING} levels") from None
    # only text with that many brackets can nest that deep: the walk is skipped for common jobs
    if isinstance(value, (list, dict)):
        data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "replace")
        if data.count(b"[") + data.count(b"{") > MAX_STORED_NESTING and _nesting_depth_exceeds(value, MAX_STORED_NESTING):
            raise MalformedPayload(f"lists and objects nest deeper than {MAX_STORED_NESTING} levels")
    return value


def decode(raw: bytes | str) -> Item:
    """Parse a job read from Redis; MalformedPayload (a ValueError) when it is not a JSON object
    with a class and list args, nested at most MAX_STORED_NESTING deep. Never any other error."""
    item = parse_json(raw)
    if not isinstance(item, dict):
        raise MalformedPayload(f"a job must be a JSON object, not {type(item).__name__}")
    if not isinstance(item.get("class"), str):
        raise MalformedPayload('the job has no "class" string')
    if not isinstance(item.get("args", []), list):
        raise MalformedPayload('the job\'s "args" is not a list')
    return item


def timestamp_seconds(value: Any) -> float | None:
    """A payload time as float epoch seconds; an integer is Sidekiq 8's milliseconds."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        seconds = value / 1000.0 if isinstance(value, int) else value if isinstance(value, float) else None
    except OverflowError:  # a hostile 400-digit integer: no usable time
        return None
    return seconds if seconds is not None and math.isfinite(seconds) else None


def malformed_item(raw: bytes, queue: str, reason: str) -> Item:
    """A dead-set entry for something that is not a job: valid JSON that keeps the raw text
    (written by the processor and by recovery alike)."""
    text = raw.decode("utf-8", errors="replace")
    return {
        "class": "jobsapp.MalformedPayload",
        "args": [text],
        "queue": queue,
        "jid": new_jid(),
        "retry": False,
        "created_at": now(),
        "enqueued_at": now(),
        "malformed_reason": reason,
    }
