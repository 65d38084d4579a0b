"""Worker logs like Sidekiq's: one line per job start and finish, and every lifecycle event.

``runworkers`` calls ``configure()`` before it starts. When the project has configured logging
for the ``jobsapp`` loggers (a handler on ``jobsapp``, one of its children or the root logger,
as ``settings.LOGGING`` usually does), that configuration is left as it is and only ``-v`` moves
the level. Otherwise (a fresh ``startproject`` has no root handler, and Python's last-resort
handler prints warnings only, without time, pid or thread) one stderr handler is installed on
the ``jobsapp`` logger:

    2026-11-22T16:30:00.123Z pid=4242 tid=jobsapp.processor-3 INFO jobsapp.processor:
        class=app.jobs.Import jid=… queue=default elapsed_ms=12.3 done      (one line)

``--log-format json`` (or ``JOBSAPP["LOG_FORMAT"] = "json"``) writes the same records as one JSON
object a line, with the structured fields a line carries (``job_class``, ``jid``, ``queue``,
``elapsed_ms``...: passed as ``extra``) as keys. Levels: ``-v 0`` WARNING, ``-v 1`` (default)
INFO, ``-v 2`` and up DEBUG.

A job's own log lines carry its class and jid, as Sidekiq's job context does: the processor runs
the middleware chain and ``perform`` inside ``job_context`` (a context variable: an ``asyncio``
task started inside inherits it, a thread does not), and ``JobContextFilter``, on runworkers'
handler, adds ``job_class`` and ``jid`` to every record made meanwhile, whichever logger made
it: ``logging.getLogger(__name__).info("charged")`` in ``perform`` prints
``... INFO app.jobs: class=app.jobs.Charge jid=… charged`` (a JSON line gets ``job_class`` and
``jid`` keys). In an unconfigured project runworkers' handler sits on the root logger, with the
root at INFO (WARNING at ``-v 0``), so users' loggers print too. A project with its own
``LOGGING`` adds ``jobsapp.logs.JobContextFilter`` to its handlers and names ``%(job_context)s``
(``class=… jid=… `` inside a job, empty outside) or ``%(jid)s`` in its format.

The per-job lines cost nothing when INFO is off: the processor asks ``isEnabledFor`` once per
job and builds no ``extra`` dict otherwise (the engine benchmark runs at WARNING).
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any, TextIO

LOGGER_NAME = "jobsapp"
FORMATS = ("text", "json")
#: LogRecord attributes that are not ``extra`` fields.
STANDARD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


#: The running job of this thread or task: (class name, jid), or None outside a job.
_current_job: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("jobsapp_current_job", default=None)


class job_context:  # used as a function: ``with job_context(class_name=..., jid=...)``
    """Log records made inside carry ``class_name`` and ``jid`` (through ``JobContextFilter``).
    A class, not a ``@contextmanager`` generator: it is entered around every job, and the
    generator's machinery cost more than the context variable it sets."""

    __slots__ = ("_job", "_token")

    def __init__(self, *, class_name: str, jid: str) -> None:
        self._job = (class_name, jid)

    def __enter__(self) -> None:
        self._token = _current_job.set(self._job)

    def __exit__(self, *exc_info: object) -> None:
        _current_job.reset(self._token)


def current_job() -> tuple[str, str] | None:
    """(class name, jid) of the job running in this thread or task, None outside a job."""
    return _current_job.get()


class JobContextFilter(logging.Filter):
    """Adds the running job to each record a handler sees: ``job_class`` and ``jid`` (unless the
    call passed its own as ``extra``) and ``job_context``, ``"class=… jid=… "`` inside a job and
    ``""`` outside, for a format string. Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = _current_job.get()
        if job is None or hasattr(record, "jid"):  # outside a job, or a line of ours that names its job
            record.job_context = ""
            return True
        record.job_class, record.jid = job
        record.job_context = f"class={job[0]} jid={job[1]} "
        return True


def level_for(verbosity: int) -> int:
    return logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG


def project_configured(logger: logging.Logger) -> bool:
    """True when a handler other than the last-resort one would see ``logger``'s records."""
    return logger.hasHandlers()


class TextFormatter(logging.Formatter):
    """``<UTC ISO time> pid=<pid> tid=<thread> <LEVEL> <logger>: <message>``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s pid=%(process)d tid=%(threadName)s %(levelname)s %(name)s: %(job_context)s%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "job_context"):  # a handler without JobContextFilter
            record.job_context = ""
        return super().format(record)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class JsonFormatter(TextFormatter):
    """One JSON object a line: time, pid, thread, level, logger, message, and the ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": self.formatTime(record),
            "pid": record.process,
            "thread": record.threadName,
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in STANDARD_ATTRIBUTES and key != "job_context" and not key.startswith("_"):
                document[key] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, separators=(",", ":"))


#: The handler ``configure`` installed (so a second call replaces it instead of doubling lines).
_installed: logging.Handler | None = None


def configure(*, verbosity: int = 1, log_format: str = "text", stream: TextIO | None = None) -> logging.Handler | None:
    """Set up logging for a worker; returns the handler installed, if any. In a project without
    logging configuration the handler goes on the root logger, so users' loggers print through
    it too: ``jobsapp`` at the ``-v`` level, the root at INFO (WARNING at ``-v 0``)."""
    global _installed
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(FORMATS)}")
    logger = logging.getLogger(LOGGER_NAME)
    root = logging.getLogger()
    if _installed is not None:
        root.removeHandler(_installed)
        _installed = None
    if project_configured(logger):
        if verbosity != 1:  # the project's own level stands unless -v says otherwise
            logger.setLevel(level_for(verbosity))
        return None
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(JobContextFilter())
    root.addHandler(handler)
    root.setLevel(min(level_for(verbosity), logging.INFO) if verbosity > 0 else logging.WARNING)
    logger.setLevel(level_for(verbosity))
    _installed = handler
    return handler
