"""Payload option rules (jobsapp.options): every feature option of a push is checked and stamped
in one place, before anything is written; a class's options are checked where it is declared."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from jobsapp import Job, client, options, sidekiq_options
from tests.testapp.jobs import Noop

BAD_OPTIONS = [
    {"timeout": 0},
    {"timeout": "soon"},
    {"expires_in": -1},
    {"expires_in": 2_000_000_000},  # an epoch time, not a relative one
    {"unique_for": 0},
    {"unique_for": 60, "unique_until": "later"},
    {"retain": "forever"},
    {"retain": float("nan")},
    {"retain": 1e16},  # Redis cannot expire that far ahead
    {"retain": options.RETAIN_MAX_SECONDS + 1},
]


@pytest.mark.parametrize("bad", BAD_OPTIONS, ids=repr)
def test_a_bad_option_is_refused_before_anything_is_written(redis, bad):
    # Given a push with one bad feature option, When it is pushed (alone, scheduled, in bulk)
    # Then each raises ValueError and Redis holds nothing at all
    with pytest.raises((ValueError, TypeError)):  # TypeError: not JSON at all (NaN)
        client.push({"class": "HardWorker", "args": [], **bad})
    with pytest.raises((ValueError, TypeError)):  # TypeError: not JSON at all (NaN)
        client.push({"class": "HardWorker", "args": [], "at": 4_000_000_000.0, **bad})
    with pytest.raises((ValueError, TypeError)):  # TypeError: not JSON at all (NaN)
        client.push_bulk({"class": "HardWorker", "args": [[1], [2]], **bad})
    with pytest.raises((ValueError, TypeError)):  # TypeError: not JSON at all (NaN)
        Noop.set(**bad).perform_async()
    assert redis.keys("*") == []


@pytest.mark.parametrize("bad", BAD_OPTIONS, ids=repr)
def test_a_bad_option_fails_where_the_class_is_declared(bad):
    with pytest.raises((ValueError, TypeError)):  # TypeError: not JSON at all (NaN)

        @sidekiq_options(**bad)
        class Declared(Job):
            def perform(self):
                pass


def test_the_rules_stamp_what_the_options_imply():
    # Given an item with every feature option, scheduled an hour ahead
    item = {"class": "X", "queue": "default", "args": [1], "timeout": 5, "expires_in": 60, "unique_for": 30, "retain": 600}
    # When the rules run
    stamp = options.stamp(item, scheduled_at=1_000_003_600.0, timestamp=1_000_000_000.0)
    # Then expires_at counts from the run-at time, the unique lock lives 30 s past it, and the
    # record's retention is known
    assert item["expires_at"] == 1_000_003_660.0 and len(item["unique_digest"]) == 64
    assert stamp.unique_lock is not None and stamp.unique_lock[1] == 3_630_000
    assert stamp.retain_seconds == 600.0


def test_a_plain_item_passes_through_unchanged():
    item = {"class": "X", "queue": "default", "args": [1]}
    stamp = options.stamp(item, scheduled_at=None, timestamp=0.0)
    assert item == {"class": "X", "queue": "default", "args": [1]}
    assert (stamp.unique_lock, stamp.retain_seconds) == (None, None)


def test_retain_from_another_client_is_clamped_not_refused():
    # the job is in Redis already: its record is kept a year at most, never without a TTL
    assert options.clamped_retain_seconds({"retain": 1e300}) == options.RETAIN_MAX_SECONDS
    assert options.clamped_retain_seconds({"retain": 10**400}) == options.RETAIN_MAX_SECONDS
    assert options.clamped_retain_seconds({"retain": 60}) == 60.0
    assert options.clamped_retain_seconds({"retain": float("nan")}) is None
    assert options.clamped_retain_seconds({"retain": "1"}) is None


def test_the_wire_format_and_the_option_rules_import_no_worker_module():
    # payload (a wire format) and options (pure rules) import no thread-owning module
    for module in ("payload", "options"):
        tree = ast.parse(Path(options.__file__).with_name(f"{module}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not imported & {"timeouts", "result_writer", "processor", "aio", "connection"}, module
