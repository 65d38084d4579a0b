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

The per-job lines cost nothing when INFO is off: the processor asks ``isEnabledFor`` once per
job and builds no ``extra`` dict otherwise (the engine benchmark runs at WARNING).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

LOGGER_NAME = "jobsapp"
FORMATS = ("text", "json")
#: LogRecord attributes that are not ``extra`` fields.
STANDARD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def level_for(verbosity: int) -> int:
    return logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG


def project_configured(logger: logging.Logger) -> bool:
    """True when a handler other than the last-resort one would see ``logger``'s records."""
    return logger.hasHandlers()


class TextFormatter(logging.Formatter):
    """``<UTC ISO time> pid=<pid> tid=<thread> <LEVEL> <logger>: <message>``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s pid=%(process)d tid=%(threadName)s %(levelname)s %(name)s: %(message)s")

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
            if key not in STANDARD_ATTRIBUTES and not key.startswith("_"):
                document[key] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, separators=(",", ":"))


#: The handler ``configure`` installed (so a second call replaces it instead of doubling lines).
_installed: logging.Handler | None = None


def configure(*, verbosity: int = 1, log_format: str = "text", stream: TextIO | None = None) -> logging.Handler | None:
    """Set up the ``jobsapp`` loggers for a worker; returns the handler installed, if any."""
    global _installed
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(FORMATS)}")
    logger = logging.getLogger(LOGGER_NAME)
    if _installed is not None:
        logger.removeHandler(_installed)
        _installed = None
    if project_configured(logger):
        if verbosity != 1:  # the project's own level stands unless -v says otherwise
            logger.setLevel(level_for(verbosity))
        return None
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(level_for(verbosity))
    _installed = handler
    return handler
