"""Celery-style tasks for the fault scenarios (autodiscovered by workers started with
``tests.faults.settings``): chord parts of a chosen size and a callback that counts its runs in
the ledger Redis (``CALLBACK_RUNS``), so a scenario can tell zero, one or two runs apart."""

from __future__ import annotations

import os
import signal
import time

from jobsapp.celery import shared_task
from tests.faults.jobs import ledger_client

CALLBACK_RUNS = "ledger:chord-callback-runs"


@shared_task
def chord_part(index: int, size_bytes: int) -> str:
    """A header task whose value is ``size_bytes`` characters."""
    return str(index % 10) * size_bytes


@shared_task
def chord_part_freezing_redis(index: int, redis_pid: int) -> str:
    """A header task that freezes Redis (SIGSTOP) as it returns: what follows it (recording the
    part, pushing the callback) meets a Redis that does not answer until the scenario wakes it."""
    os.kill(redis_pid, signal.SIGSTOP)
    return str(index)


@shared_task
def chord_sizes(values: list[str], chord_name: str) -> list[int]:
    """The callback: counts its run under ``chord_name`` and returns each part's length."""
    ledger_client().hincrby(CALLBACK_RUNS, chord_name, 1)
    return [len(value) for value in values]


@shared_task
def chord_part_slow(index: int, sleep_ms: int) -> int:
    """A header task that takes ``sleep_ms`` (so a SIGKILL finds parts running) and returns ``index``."""
    time.sleep(sleep_ms / 1000)
    return index


@shared_task
def chord_total(values: list[int], chord_name: str) -> int:
    """A callback that counts its runs under ``chord_name`` and returns the sum of the parts."""
    ledger_client().hincrby(CALLBACK_RUNS, chord_name, 1)
    return sum(values)
