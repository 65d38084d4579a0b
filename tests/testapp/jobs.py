"""Job classes the engine tests enqueue and run (registered on import)."""

from __future__ import annotations

from jobsapp import Job, sidekiq_options


class Noop(Job):
    def perform(self, *args, **kwargs):
        return None


@sidekiq_options(queue="imports", retry=5, use_task_event=True, tags=["etl"])
class ImportRow(Job):
    def perform(self, row_id, *, dry_run=False):
        return row_id


@sidekiq_options(class_name="HardWorker")
class HardWorker(Job):
    def perform(self, name, count):
        return None
