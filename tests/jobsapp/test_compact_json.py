"""One spelling of compact JSON (``payload.compact_json``) and one owner of the duration
histogram's JSON (``processes.DurationHistogram``), each with the rule the writers rely on."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

from jobsapp import payload
from jobsapp.payload import compact_json
from jobsapp.processes import DURATION_BUCKETS_SECONDS, DurationCounter, DurationHistogram

ROOT = Path(__file__).resolve().parents[2]
#: payload.py defines it; logs.py writes log lines (not a wire format) with ``default=str``.
ALLOWED = {ROOT / "jobsapp" / "payload.py", ROOT / "jobsapp" / "logs.py"}


def test_it_is_sidekiqs_compact_form_with_text_as_it_is():
    assert compact_json({"class": "HardWorker", "args": ["café", 1.5, None]}) == '{"class":"HardWorker","args":["café",1.5,null]}'
    assert compact_json({"b": 1, "a": 2}, sort_keys=True) == '{"a":2,"b":1}'


def test_nan_is_refused_where_payloads_are_written_and_let_through_only_when_asked():
    # When a payload with NaN or Infinity is encoded for Redis, Then it is refused
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError):
            compact_json({"args": [bad]})
        with pytest.raises(ValueError):
            payload.encode({"class": "A", "args": [], "jid": "a" * 24, "extra": bad})
    # And a job another client wrote with NaN is re-encoded as it is when asked (filed, not lost)
    assert compact_json({"args": [math.nan]}, allow_nan=True) == '{"args":[NaN]}'


def test_no_module_spells_compact_json_itself():
    # When every module of jobsapp/ and tracking/ is scanned for a JSON "separators" argument
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for package in ("jobsapp", "tracking")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path not in ALLOWED
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.keyword) and node.arg == "separators"
    ]
    # Then there is none: they call payload.compact_json
    assert offenders == []


def test_a_histogram_round_trips_through_its_json_and_two_processes_add_up():
    # Given a worker that counted three jobs of one class
    counter = DurationCounter()
    for seconds in (0.003, 0.2, 400.0):
        counter.observe("Report", seconds)
    (histogram,) = counter.snapshot().values()
    # Then its buckets are cumulative up to +Inf, and its JSON is the documented shape
    assert histogram.count == 3 and histogram.buckets[0.005] == 1 and histogram.buckets[0.25] == 2
    assert histogram.buckets[math.inf] == 3 and len(histogram.buckets) == len(DURATION_BUCKETS_SECONDS) + 1
    stored = json.loads(histogram.encode())
    assert set(stored) == {"buckets", "sum", "count"} and stored["buckets"]["+Inf"] == 3 and stored["buckets"]["0.005"] == 1
    # When the reader decodes it and adds a second process's counts
    decoded = DurationHistogram.decode(histogram.encode())
    assert decoded == histogram
    total = decoded.plus(decoded)
    assert total.count == 6 and total.buckets[math.inf] == 6 and total.sum_seconds == pytest.approx(2 * 400.203)


def test_a_garbled_histogram_is_read_leniently():
    assert DurationHistogram.decode(b"not json") is None
    assert DurationHistogram.decode('{"buckets": []}') is None
    assert DurationHistogram.decode('{"buckets": {"x": 1, "1.0": 2, "2.5": "many"}, "sum": "?", "count": true}') == DurationHistogram(
        {1.0: 2}, 0.0, 0
    )
