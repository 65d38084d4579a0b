"""Worker logs like Sidekiq's (issue 8): runworkers' own handler when the project configured
none (time, pid, thread, level), a line per job start and finish, lifecycle lines, ``-v`` levels,
JSON lines with the structured fields, and a second stop signal that hurries the shutdown."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import threading
import time

import pytest

from jobsapp import logs
from jobsapp.connection import get_redis
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.launcher import SECOND_SIGNAL_AFTER_SECONDS, WorkerOptions
from jobsapp.worker.launcher import WorkerProcess as Launched
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from tests.manual_clock import ManualClock
from tests.testapp.jobs import Explode, Record, Sleep
from tests.workers import WorkerProcess, wait_until

LINE_OF_ANY_LOGGER = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z pid=\d+ tid=\S+ INFO [\w.]+: class=\S+ jid=\S+ queue=\S+ .+$")
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z pid=\d+ tid=\S+ (DEBUG|INFO|WARNING|ERROR) jobsapp\.\S+: .+$")


@pytest.fixture
def unconfigured(monkeypatch):
    """Call it first: no handler anywhere above the jobsapp loggers (pytest adds its capture
    handlers to the root logger only once the test runs, after the fixtures)."""
    jobsapp_logger = logging.getLogger("jobsapp")
    level, root_level = jobsapp_logger.level, logging.getLogger().level

    def clear() -> None:
        monkeypatch.setattr(logging.getLogger(), "handlers", [])
        monkeypatch.setattr(jobsapp_logger, "handlers", [])

    yield clear
    if logs._installed is not None:
        logging.getLogger().removeHandler(logs._installed)
        logs._installed = None
    jobsapp_logger.setLevel(level)
    logging.getLogger().setLevel(root_level)


def test_an_unconfigured_project_gets_a_handler_with_time_pid_thread_and_level(unconfigured):
    unconfigured()
    stream = io.StringIO()
    handler = logs.configure(verbosity=1, stream=stream)
    assert handler is not None
    logging.getLogger("jobsapp.processor").info("class=%s jid=%s done", "app.jobs.X", "abc")
    logging.getLogger("jobsapp.processor").debug("not at -v 1")
    handler.flush()  # INFO lines are written in batches
    [line] = stream.getvalue().splitlines()
    assert LINE.match(line) and line.endswith("INFO jobsapp.processor: class=app.jobs.X jid=abc done"), line
    # Configuring twice (a test, a restart) replaces the handler instead of doubling lines
    handler = logs.configure(verbosity=2, stream=stream)
    logging.getLogger("jobsapp.launcher").debug("now at -v 2")
    handler.flush()
    assert stream.getvalue().count("\n") == 2 and "now at -v 2" in stream.getvalue()


@pytest.mark.parametrize(("verbosity", "level"), [(0, logging.WARNING), (1, logging.INFO), (2, logging.DEBUG), (3, logging.DEBUG)])
def test_verbosity_sets_the_level(unconfigured, verbosity, level):
    unconfigured()
    logs.configure(verbosity=verbosity, stream=io.StringIO())
    assert logging.getLogger("jobsapp").level == level


def test_json_lines_carry_the_extra_fields(unconfigured):
    unconfigured()
    stream = io.StringIO()
    handler = logs.configure(log_format="json", stream=stream)
    fields = {"job_class": "app.jobs.X", "jid": "0123456789abcdef01234567", "queue": "default", "elapsed_ms": 12.5}
    logging.getLogger("jobsapp.processor").info("class=%s done", "app.jobs.X", extra=fields)
    handler.flush()
    document = json.loads(stream.getvalue())
    assert document["message"] == "class=app.jobs.X done" and document["level"] == "INFO"
    assert {"time", "pid", "thread", "logger"} <= set(document)
    assert {key: document[key] for key in fields} == fields


def test_a_project_that_configured_logging_keeps_its_handlers(monkeypatch):
    # Given a root handler (as settings.LOGGING installs), Then runworkers adds none of its own
    monkeypatch.setattr(logging.getLogger("jobsapp"), "handlers", [])
    assert logging.getLogger().handlers  # pytest's, standing in for the project's
    assert logs.configure(verbosity=1, stream=io.StringIO()) is None


def test_a_bad_log_format_is_refused():
    with pytest.raises(ValueError, match="json"):
        logs.configure(log_format="xml")


@pytest.mark.slow
def test_worker_logs_jobs_and_lifecycle_and_a_second_term_hurries_the_shutdown(redis_server, redis):
    # Given a worker in a project without logging configuration, a slow job and a quick one
    worker = WorkerProcess(
        ["-c", "2", "-t", "60"],
        env={"DJANGO_SETTINGS_MODULE": "tests.settings_unconfigured_logging"},
        redis_url=redis_server.url,
        stop_timeout_seconds=20,
    ).start()
    jid = Record.perform_async("quick")
    Sleep.perform_async(120, "slow")
    wait_until(lambda: redis.llen("test:started") == 1 and f"jid={jid}" in worker.output and "done" in worker.output, message="jobs ran")
    # When it is told to stop, and told again while the slow job runs
    worker.signal(signal.SIGTERM)
    wait_until(lambda: "stopping:" in worker.output, message="the worker said it is stopping")
    time.sleep(SECOND_SIGNAL_AFTER_SECONDS + 0.1)  # a second signal, not the first one delivered twice
    worker.signal(signal.SIGTERM)
    # Then it puts the slow job back at once (not after -t 60) and exits cleanly
    assert worker.stop() == 0
    output = worker.output
    lines = [line for line in output.splitlines() if line.startswith("20")]
    assert lines and all(LINE.match(line) for line in lines), output
    started = r"INFO jobsapp\.launcher: process \S+ started: 2 threads, queues default, reliable fetch, Redis redis://127\.0\.0\.1:\d+/0"
    assert re.search(started, output)
    assert re.search(rf"INFO jobsapp\.processor: class=\S+\.Record jid={jid} queue=default start", output)
    assert re.search(rf"INFO jobsapp\.processor: class=\S+\.Record jid={jid} queue=default elapsed_ms=[\d.]+ done", output)
    assert "stopping: waiting up to 60 s for 1 running jobs" in output
    assert "second stop signal: putting 1 running jobs back now" in output
    assert re.search(r"class=\S+\.Sleep jid=\w+ queue=default put back \(unfinished at shutdown\)", output)
    assert json.loads(redis.lindex("queue:default", -1))["class"].endswith(".Sleep")


def test_one_ctrl_c_delivered_twice_does_not_hurry_but_a_second_one_does():
    # Given a worker process and a clock we move (with -P, one Ctrl-C reaches a child from the
    # terminal and again from the parent that forwards it)
    clock = ManualClock()
    process = Launched(WorkerOptions(), clock=clock)
    # When the same Ctrl-C arrives twice at once, Then the worker stops without hurrying
    process.on_signal("INT")
    process.on_signal("INT")
    process._handle_pending_signals()
    assert process.stop_requested.is_set() and not process.hurry_requested.is_set()
    # When the user presses Ctrl-C again a moment later, Then it hurries
    clock.advance(SECOND_SIGNAL_AFTER_SECONDS)
    process.on_signal("TERM")
    process._handle_pending_signals()
    assert process.hurry_requested.is_set()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_records_of_any_logger_made_inside_a_job_carry_its_class_and_jid(unconfigured, log_format):
    # Given runworkers' handler in a project without logging configuration
    unconfigured()
    stream = io.StringIO()
    handler = logs.configure(log_format=log_format, stream=stream)
    # When a user's own logger logs inside a job's context, and outside any job
    with logs.job_context(class_name="app.jobs.Charge", jid="0123456789abcdef01234567"):
        logging.getLogger("app.billing").info("charged %s", "bob")
    logging.getLogger("app.billing").info("between jobs")
    handler.flush()
    inside, outside = stream.getvalue().splitlines()
    # Then the line made inside names the job, the other does not
    if log_format == "json":
        assert json.loads(inside)["job_class"] == "app.jobs.Charge" and json.loads(inside)["jid"] == "0123456789abcdef01234567"
        assert json.loads(inside)["message"] == "charged bob" and "jid" not in json.loads(outside)
    else:
        assert inside.endswith("INFO app.billing: class=app.jobs.Charge jid=0123456789abcdef01234567 charged bob"), inside
        assert outside.endswith("INFO app.billing: between jobs"), outside


@pytest.mark.slow
@pytest.mark.parametrize(("log_format", "kind"), [("text", "sync"), ("json", "sync"), ("text", "async")])
def test_a_job_logging_through_its_own_logger_names_its_class_and_jid_in_the_worker_output(redis_server, redis, log_format, kind):
    from tests.testapp.jobs import AsyncLogsThroughItsOwnLogger, LogsThroughItsOwnLogger

    job_class = AsyncLogsThroughItsOwnLogger if kind == "async" else LogsThroughItsOwnLogger

    # Given a worker in a project without logging configuration, in text or JSON
    with WorkerProcess(
        ["-c", "2", "--log-format", log_format],
        env={"DJANGO_SETTINGS_MODULE": "tests.settings_unconfigured_logging"},
        redis_url=redis_server.url,
    ) as worker:
        # When a job logs through its own logger
        jid = job_class.perform_async("bob")
        wait_until(lambda: "charged bob" in worker.output, message="the job logged")
        output = worker.output
    # Then its line carries the job's class and jid
    (line,) = [line for line in output.splitlines() if "charged bob" in line]
    class_name = f"tests.testapp.jobs.{job_class.__name__}"
    if log_format == "json":
        document = json.loads(line)
        assert (document["logger"], document["job_class"], document["jid"]) == ("tests.testapp.billing", class_name, jid)
    else:
        assert line.endswith(f"INFO tests.testapp.billing: class={class_name} jid={jid} charged bob"), line


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_failed_job_logs_a_warning_with_its_traceback_even_at_verbosity_0(unconfigured, redis, log_format):
    # Given runworkers' handler at -v 0 (warnings only), in text or JSON
    unconfigured()
    stream = io.StringIO()
    logs.configure(verbosity=0, log_format=log_format, stream=stream)
    # When a job fails
    jid = Explode.perform_async("kaboom")
    inflight = "jobsapp:inflight:logs-test"
    raw = redis.lmove("queue:default", inflight, "RIGHT", "LEFT")
    Processor(RetryPolicy(get_redis(), inflight)).process(UnitOfWork(raw, "default"))
    # Then its one line is a WARNING naming the job, with the traceback down to the raise
    output = stream.getvalue()
    if log_format == "json":
        (document,) = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
        assert document["level"] == "WARNING" and document["jid"] == jid and "ValueError: kaboom" in document["message"]
        traceback = document["exception"]
    else:
        warning = rf"WARNING jobsapp\.processor: class=\S+\.Explode jid={jid} queue=default elapsed_ms=[\d.]+ fail \(retry\)"
        assert re.search(warning, output)
        traceback = output
    assert "Traceback (most recent call last)" in traceback and "raise ValueError(message)" in traceback
    assert traceback.rstrip().endswith("ValueError: kaboom")


@pytest.mark.slow
def test_a_worker_at_verbosity_0_logs_a_failure_with_its_traceback(redis_server, redis):
    # Given a worker at -v 0 in a project without logging configuration
    with WorkerProcess(
        ["-c", "1", "-v", "0"], env={"DJANGO_SETTINGS_MODULE": "tests.settings_unconfigured_logging"}, redis_url=redis_server.url
    ) as worker:
        # When a job fails
        jid = Explode.perform_async("kaboom")
        wait_until(lambda: redis.zcard("retry") == 1 and "ValueError: kaboom" in worker.output, message="the failure was logged")
        output = worker.output
    # Then the warning and its traceback are in the output, and no INFO line is
    assert re.search(rf"WARNING jobsapp\.processor: class=\S+\.Explode jid={jid} .* fail \(retry\)", output)
    assert "Traceback (most recent call last)" in output and " INFO " not in output


def test_per_job_lines_wait_for_the_flusher_and_any_other_line_is_written_at_once_after_them():
    # Given a buffered handler on a logger of its own
    stream = io.StringIO()
    handler = logs.BufferedStreamHandler(stream)
    handler.setFormatter(logs.TextFormatter())
    logger = logging.getLogger("tests.buffered")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    lines = logs.JobLines(logger)
    try:
        # When a job starts, Then its line waits, and the flusher writes it soon after
        lines.started("app.jobs.X", "0123456789abcdef01234567", "default")
        assert stream.getvalue() == ""
        wait_until(lambda: " start" in stream.getvalue(), timeout_seconds=5, message="the flusher wrote the line")
        # When job lines are followed by another line, Then all are written at once, in order
        lines.finished("app.jobs.X", "0123456789abcdef01234567", "default", 0.002)
        lines.started("app.jobs.Y", "0123456789abcdef01234568", "default")
        logger.info("stopping")
        messages = [line.rsplit(" ", 1)[1] for line in stream.getvalue().splitlines()]
        assert messages == ["start", "done", "start", "stopping"]
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


@pytest.mark.parametrize("queue", ['qu"é\\ue', 7])
def test_runworkers_json_job_lines_encode_any_field_as_its_encoder_would(unconfigured, queue):
    # Given runworkers' JSON handler, and a job line whose queue needs escaping or is no string
    unconfigured()
    stream = io.StringIO()
    handler = logs.configure(log_format="json", stream=stream)
    assert handler is not None
    fields = {"job_class": "app.jobs.Ünïcode", "jid": "0123456789abcdef01234567", "queue": queue}
    # When the line is written without a record, and the same line through the handler as a record
    logs.JobLines(logging.getLogger("jobsapp.processor")).finished(fields["job_class"], fields["jid"], queue, 0.01234)  # type: ignore[arg-type]
    logging.getLogger("jobsapp.processor").info(
        logs.JobLines.FINISHED, fields["job_class"], fields["jid"], queue, 12.3, extra={**fields, "elapsed_ms": 12.3}
    )
    handler.flush()
    # Then both lines are the same text but for the time, and the fields read back as given
    direct, recorded = stream.getvalue().splitlines()
    assert direct.split(",", 1)[1] == recorded.split(",", 1)[1]
    assert json.loads(direct)["queue"] == queue and json.loads(direct)["elapsed_ms"] == 12.3


def test_job_lines_from_ten_threads_are_all_written_once_each_thread_in_order():
    # Given a buffered handler on a logger of its own, flushed by size as well as by time
    stream = io.StringIO()
    handler = logs.BufferedStreamHandler(stream)
    handler.setFormatter(logs.TextFormatter())
    handler.max_pending_lines = 50
    logger = logging.getLogger("tests.buffered.threads")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    lines = logs.JobLines(logger)

    def run_jobs(thread: int) -> None:
        for job in range(500):
            lines.started("app.jobs.X", f"{thread}-{job}", "default")
            lines.finished("app.jobs.X", f"{thread}-{job}", "default", 0.001)

    try:
        # When ten threads log their jobs' lines at once, with the flusher writing meanwhile
        threads = [threading.Thread(target=run_jobs, args=(number,), name=f"tests.jobs-{number}") for number in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        handler.flush()
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    # Then every line is written once, whole, and each thread's lines keep their order
    written = stream.getvalue().splitlines()
    assert len(written) == 10 * 500 * 2 and all(LINE_OF_ANY_LOGGER.match(line) for line in written)
    for number in range(10):
        mine = [line.split("jid=")[1].split(" queue=default ") for line in written if f"tid=tests.jobs-{number} " in line]
        assert mine == [[f"{number}-{job}", word] for job in range(500) for word in ("start", "elapsed_ms=1.0 done")]


def test_a_handler_added_while_job_lines_skip_records_soon_gets_records():
    # Given job lines written without records (the logger's only handler is a buffered one)
    stream = io.StringIO()
    handler = logs.BufferedStreamHandler(stream)
    handler.setFormatter(logs.TextFormatter())
    logger = logging.getLogger("tests.buffered.added")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    lines = logs.JobLines(logger)
    records: list[logging.LogRecord] = []
    capture = logging.Handler()
    capture.emit = records.append  # type: ignore[method-assign]
    try:
        lines.started("app.jobs.X", "0123456789abcdef01234567", "default")
        # When a handler of another kind joins while jobs keep running
        logger.addHandler(capture)
        wait_until(
            lambda: lines.started("app.jobs.X", "0123456789abcdef01234568", "default") or records,
            timeout_seconds=5,
            message="the added handler got a record",
        )
        handler.flush()
    finally:
        logger.removeHandler(handler)
        logger.removeHandler(capture)
        logger.propagate = True
    # Then it gets the job lines' records, and the buffered handler writes the same lines as before
    assert records[0].getMessage() == "class=app.jobs.X jid=0123456789abcdef01234568 queue=default start"
    assert records[0].jid == "0123456789abcdef01234568"
    assert stream.getvalue().count(" start\n") >= 2


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_line_waiting_at_a_fork_is_written_once_and_the_child_writes_its_own(tmp_path):
    # Given a buffered handler writing to a file, with a line waiting
    path = tmp_path / "worker.log"
    with path.open("w") as stream:
        handler = logs.BufferedStreamHandler(stream)
        logger = logging.getLogger("tests.forked")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            logs.JobLines(logger).started("app.jobs.X", "0123456789abcdef01234567", "before")
            # When the process forks and the child logs a line and leaves without flushing
            child = os.fork()
            if child == 0:  # pragma: no cover  # the child process
                logs.JobLines(logger).started("app.jobs.X", "0123456789abcdef01234567", "child")
                time.sleep(logs.BufferedStreamHandler.flush_interval_seconds * 5)
                os._exit(0)
            os.waitpid(child, 0)
            handler.flush()
        finally:
            logger.removeHandler(handler)
            logger.propagate = True
    # Then the waiting line was written once, and the child's line by the child's own flusher
    assert [line.split("queue=")[1] for line in path.read_text().splitlines()] == ["before start", "child start"]


def _record_of(call, logger_name: str) -> logging.LogRecord:
    records: list[logging.LogRecord] = []
    capture = logging.Handler()
    capture.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(logger_name)
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        call(logger)
    finally:
        logger.removeHandler(capture)
        logger.propagate = True
    (record,) = records
    return record


def test_a_job_line_is_the_record_logger_info_would_make():
    # Given the done line made by logger.info with its extra fields, and by JobLines
    fields = {"job_class": "app.jobs.X", "jid": "0123456789abcdef01234567", "queue": "default", "elapsed_ms": 12.3}
    expected = _record_of(
        lambda logger: logger.info(logs.JobLines.FINISHED, "app.jobs.X", fields["jid"], "default", 12.3, extra=fields), "tests.joblines"
    )
    made = _record_of(lambda logger: logs.JobLines(logger).finished("app.jobs.X", fields["jid"], "default", 0.0123), "tests.joblines")
    # Then every attribute a handler or formatter reads is the same, but the time and the line
    different = {"created", "msecs", "relativeCreated", "lineno"}
    assert set(made.__dict__) == set(expected.__dict__)
    assert {key: value for key, value in made.__dict__.items() if key not in different} == {
        key: value for key, value in expected.__dict__.items() if key not in different
    }
    assert made.getMessage() == "class=app.jobs.X jid=0123456789abcdef01234567 queue=default elapsed_ms=12.3 done"
    assert abs(made.created - expected.created) < 5 and made.funcName == "<lambda>" and made.filename == "test_logs.py"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_runworkers_handler_writes_job_lines_as_its_formatter_would(unconfigured, log_format):
    # Given runworkers' handler (job lines are then written without a record)
    unconfigured()
    stream = io.StringIO()
    handler = logs.configure(log_format=log_format, stream=stream)
    assert handler is not None
    lines = logs.JobLines(logging.getLogger("jobsapp.processor"))
    # When a job starts and finishes, and the same lines go through the handler as records
    lines.started("app.jobs.X", "0123456789abcdef01234567", "default")
    lines.finished("app.jobs.X", "0123456789abcdef01234567", "default", 0.0125)
    fields = {"job_class": "app.jobs.X", "jid": "0123456789abcdef01234567", "queue": "default"}
    processor = logging.getLogger("jobsapp.processor")
    processor.info(logs.JobLines.STARTED, "app.jobs.X", fields["jid"], "default", extra=fields)
    processor.info(logs.JobLines.FINISHED, "app.jobs.X", fields["jid"], "default", 12.5, extra={**fields, "elapsed_ms": 12.5})
    handler.flush()
    # Then both ways make the same lines, but for the time
    direct_start, direct_done, record_start, record_done = stream.getvalue().splitlines()
    if log_format == "json":
        documents = [json.loads(line) for line in (direct_start, direct_done, record_start, record_done)]
        for document in documents:
            document.pop("time")
        assert documents[0] == documents[2] and documents[1] == documents[3]
        assert list(documents[1]) == list(documents[3])  # the same keys in the same order
        assert documents[1]["elapsed_ms"] == 12.5 and documents[1]["jid"] == fields["jid"]
    else:
        assert LINE.match(direct_start) and LINE.match(direct_done)
        assert direct_start.split(" ", 1)[1] == record_start.split(" ", 1)[1]
        assert direct_done.split(" ", 1)[1] == record_done.split(" ", 1)[1]
        assert direct_done.endswith(
            "INFO jobsapp.processor: class=app.jobs.X jid=0123456789abcdef01234567 queue=default elapsed_ms=12.5 done"
        )
