"""Tracked jobs the tracking unit tests push and run in-process (registered on import)."""

from __future__ import annotations

import asyncio
import threading

from jobsapp import Job, sidekiq_options
from tracking import BusinessFailure, TrackedJob


class Untracked(Job):
    def perform(self, *args):
        return "untracked"


class Succeeds(TrackedJob):
    def perform(self, value):
        self.add_message(f"working on {value}")
        return value


class FailsOnPurpose(TrackedJob):
    def perform(self, reason):
        raise BusinessFailure(reason)


class Crashes(TrackedJob):
    def perform(self, value):
        raise ZeroDivisionError("division by zero")


@sidekiq_options(use_task_event=True, queue="reports")
class PlainTracked(Job):
    """Tracked through the option alone, not the base class."""

    def perform(self, value, *, scale=1):
        return value * scale


class Reports(TrackedJob):
    def perform(self, rows):
        for row in range(1, rows + 1):
            self.report_progress(row, rows, unit="row")


class AsyncReports(TrackedJob):
    async def perform(self, rows):
        for row in range(1, rows + 1):
            self.report_progress(row, rows, unit="row")
            await asyncio.sleep(0)


class ReportsThenWaits(TrackedJob):
    """Reports one step, then waits for ``release`` (a long step) before finishing."""

    release = threading.Event()

    def perform(self, seconds):
        self.add_message("step 1 of 4")
        if not ReportsThenWaits.release.wait(seconds):
            raise TimeoutError("never released")
