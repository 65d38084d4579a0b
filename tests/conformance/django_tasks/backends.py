"""The backends Django's tests/tasks are ported onto: JobsBackend, with the test-side reads that
Django's dummy and immediate backends have and JobsBackend does not need.

Upstream runs those tests on ``DummyBackend`` (records what is enqueued, runs nothing) and
``ImmediateBackend`` (runs the task inside ``enqueue``). The ports (port.py) point them here:

- ``RecordingBackend`` is JobsBackend plus the dummy backend's ``results`` list and ``clear()``:
  the ids it enqueued, read back from Redis with ``get_result`` (never an in-memory copy);
- ``WorkerRunBackend`` is JobsBackend whose ``enqueue`` returns once the suite's real
  ``runworkers`` has run the job, as the immediate backend returns once it ran the task; the
  worker's ``django.tasks`` log lines about that task (with a failure's traceback) are re-emitted
  on the caller's ``django.tasks`` logger, where the upstream cases' ``assertLogs`` read them.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from django.tasks import TaskResult

from jobsapp import results as job_results
from jobsapp.django_tasks import JobsBackend
from tests.workers import WorkerProcess

#: Seconds an enqueue waits for the worker to finish the task (a regression fails, never hangs).
WORKER_TIMEOUT_SECONDS = 30.0
#: One line of the worker's log from the django.tasks logger, in project/settings.py's format
#: (jobsapp's text format: "<ISO time> pid=<pid> tid=<thread> LEVEL logger: class=<job> jid=<jid>
#: message", the job's fields standing before the message of a line logged inside a job).
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z pid=\d+ tid=\S+ (?P<level>[A-Z]+) django\.tasks: (?:class=\S+ jid=\S+ )?(?P<message>.*)$")
STARTS_A_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT")
FINAL_STATES = ("state=SUCCESSFUL", "state=FAILED")
SETTINGS_MODULE = "tests.conformance.django_tasks.settings"


class SuiteWorker:
    """The ``runworkers`` of the running test module (set by the conftest's ``worker`` fixture)."""

    process: WorkerProcess | None = None


def wait_finished(result: TaskResult[Any, Any], *, timeout_seconds: float = WORKER_TIMEOUT_SECONDS) -> TaskResult[Any, Any]:
    """Refresh ``result`` until the worker has finished it (AssertionError at the timeout)."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        result.refresh()
        if result.is_finished:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"task {result.task.module_path} ({result.id}) did not finish in {timeout_seconds:g} s: {result.status}")
        time.sleep(0.02)


def task_log_records(output: str, result_id: str) -> list[tuple[int, str]]:
    """The worker's django.tasks log records about ``result_id``, as (level, message) with any
    traceback lines that follow one; empty until its final state line is written."""
    records: list[tuple[int, str]] = []
    current: list[str] | None = None
    for line in output.splitlines():
        match = LOG_LINE.match(line)
        if match and f"id={result_id} " in match["message"]:
            current = [match["message"]]
            records.append((logging.getLevelName(match["level"]), "\n".join(current)))
            continue
        if current is not None and not STARTS_A_LOG_LINE.match(line):
            current.append(line)
            records[-1] = (records[-1][0], "\n".join(current))
            continue
        current = None
    return records


def relay_worker_logs(worker: WorkerProcess, result_id: str) -> None:
    """Re-emit on this process's ``django.tasks`` logger what the worker logged about
    ``result_id``, once its final state line is written (AssertionError at the timeout)."""
    deadline = time.monotonic() + WORKER_TIMEOUT_SECONDS
    while not any(state in message for _, message in task_log_records(worker.output, result_id) for state in FINAL_STATES):
        if time.monotonic() > deadline:
            raise AssertionError(f"the worker logged no final state for {result_id}:\n{worker.output[-3000:]}")
        time.sleep(0.02)
    logger = logging.getLogger("django.tasks")
    for level, message in task_log_records(worker.output, result_id):
        logger.log(level, "%s", message)


class RecordingBackend(JobsBackend):
    """JobsBackend with the dummy backend's ``results`` (read from Redis) and ``clear()``."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.enqueued_ids: list[str] = []

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        result = super().enqueue(task, args, kwargs)
        self.enqueued_ids.append(result.id)
        return result

    @property
    def results(self) -> list[TaskResult[Any, Any]]:
        return [self.get_result(result_id) for result_id in self.enqueued_ids]

    def clear(self) -> None:
        for result_id in self.enqueued_ids:
            job_results.forget(result_id)
        self.enqueued_ids.clear()


class WorkerRunBackend(JobsBackend):
    """JobsBackend whose ``enqueue`` returns the result once the suite's worker has run it."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        result = wait_finished(super().enqueue(task, args, kwargs))
        worker = SuiteWorker.process
        if worker is None:
            raise AssertionError("WorkerRunBackend needs the suite's worker fixture")
        relay_worker_logs(worker, result.id)
        return result


def run_queued_tasks(result: TaskResult[Any, Any]) -> None:
    """A worker runs what is queued, until ``result`` is finished (the dummy backend's tests set
    the stored status by hand instead)."""
    with WorkerProcess(["-q", "default"], env={"DJANGO_SETTINGS_MODULE": SETTINGS_MODULE}):
        wait_finished(result)


def run_burst_worker(backend: RecordingBackend, queues: list[str]) -> None:
    """RQ's ``worker.work(burst=True)``: a worker runs every job ``backend`` enqueued so far, then
    stops (they leave ``backend.enqueued_ids``); its log lines about them are relayed (``relay_worker_logs``), as RQ's are in-process."""
    arguments = [argument for queue in queues for argument in ("-q", queue)]
    with WorkerProcess(arguments, env={"DJANGO_SETTINGS_MODULE": SETTINGS_MODULE}) as worker:
        while backend.enqueued_ids:
            result_id = backend.enqueued_ids.pop(0)
            wait_finished(backend.get_result(result_id))
            relay_worker_logs(worker, result_id)
