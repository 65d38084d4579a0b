"""Worker logs like Sidekiq's: one line per job start and finish, and every lifecycle event.

``runworkers`` calls ``configure()`` before it starts (in its main thread; the handler it installs
is then written from any thread, and by ``jobsapp.log-flusher``). When the project has configured logging
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

The per-job lines cost little at INFO and nothing when INFO is off (the processor asks
``isEnabledFor`` once, when it is built). A worker runs thousands of jobs a second, and what
``logger.info`` does per call costs more than an empty job: ``JobLines.started`` and ``finished``
build the record themselves (the caller's frame read directly, no ``findCaller`` walk, no
``LogRecord.__init__``) and hand it to ``Logger.handle``, so every handler, filter and
``caplog`` sees the same record as before (``msg``, ``args``, the ``extra`` fields). Writing one
line per ``write`` and ``flush`` in ten threads cost more again: each system call lets the GIL go,
and the threads queue behind the handler's lock. runworkers' own handler is therefore a
``BufferedStreamHandler``: its lines are formatted in the calling thread and written in batches by
one thread (``jobsapp.log-flusher``), at most ``flush_interval_seconds`` (0.1 s) after they were
made; any other line (a lifecycle line, a failure, a user's own) is written at once, after the
per-job lines waiting before it, in order. Its buffer is
written before a fork, at exit (``logging.shutdown``, which the ``-P`` children call too) and by
``flush()``; a process killed outright loses at most its last 0.1 s of per-job lines, as with
any buffered stream. A project's own ``LOGGING`` can name it (``"class":
"jobsapp.logs.BufferedStreamHandler"``, with ``TextFormatter`` or ``JsonFormatter``). When every
handler a per-job record would reach is such a pair (filtered by ``JobContextFilter`` at most),
``JobLines`` makes no record at all: the processor thread appends the line's fields (time, thread,
class, jid, queue, elapsed) to each handler's queue, without a lock, and the flusher formats them
into the formatter's very line, in order with the other lines. Which handlers a line reaches is
looked up again every ``DIRECT_RECHECK_NANOSECONDS`` (0.1 s) and after each ``configure``, not per
line: a handler or filter added to the loggers while a worker runs sees the per-job records
within 0.1 s. The UTC second of a stamp is formatted once per second (no ``strftime`` per line).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import threading
import time
import weakref
from collections import deque
from json.encoder import encode_basestring_ascii
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


#: (UTC second, its "YYYY-MM-DDTHH:MM:SS" text): the last second a line was stamped with.
_stamped_second: tuple[int, str] = (-1, "")


def utc_stamp(created: float, msecs: float) -> str:
    """``created`` as ``2026-11-22T16:30:00.123Z``; the second's text is made once per second."""
    global _stamped_second
    second = int(created)
    cached = _stamped_second
    if cached[0] != second:
        cached = _stamped_second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{cached[1]}.{int(msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``<UTC ISO time> pid=<pid> tid=<thread> <LEVEL> <logger>: <message>``, then the traceback
    and the stack, as ``logging.Formatter`` appends them."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s pid=%(process)d tid=%(threadName)s %(levelname)s %(name)s: %(job_context)s%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = utc_stamp(record.created, record.msecs)
        job_context = getattr(record, "job_context", "")  # "" from a handler without JobContextFilter
        head = f"{record.asctime} pid={record.process} tid={record.threadName} {record.levelname} {record.name}"
        text = f"{head}: {job_context}{record.message}"
        return self._with_traceback(record, text)

    def _with_traceback(self, record: logging.LogRecord, text: str) -> str:
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text = f"{text}\n{record.exc_text}"
        if record.stack_info:
            text = f"{text}\n{self.formatStack(record.stack_info)}"
        return text

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return utc_stamp(record.created, record.msecs)


class JsonFormatter(TextFormatter):
    """One JSON object a line: time, pid, thread, level, logger, message, and the ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": utc_stamp(record.created, record.msecs),
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
        return _encode_json(document)


#: ``json.dumps(document, default=str, separators=(",", ":"))``, without a new encoder per call.
_encode_json = json.JSONEncoder(default=str, separators=(",", ":")).encode


class BufferedStreamHandler(logging.StreamHandler):
    """A ``StreamHandler`` that writes the per-job lines in batches (see the module's header):
    kept in the calling thread as the job's fields (``JobLines``) or as a formatted line (a
    record of another path), formatted and written by ``jobsapp.log-flusher`` at most
    ``flush_interval_seconds`` later, or as soon as ``max_pending_lines`` wait. Every other line (a
    lifecycle line, a failure, a user's own) is written at once, after the lines waiting before
    it, as ``StreamHandler`` writes it. ``flush()`` writes what waits; a line is never dropped,
    only late."""

    flush_interval_seconds = 0.1
    max_pending_lines = 1000

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        #: What waits, in order: a formatted line, or a per-job line's fields (``JobLines``).
        #: Appended without a lock (a deque's append and popleft are atomic), so ten processor
        #: threads never queue for it.
        self._pending: deque[str | _JobLine] = deque()
        self._armed = False  # the flusher will write this handler's lines
        self._hurried = False  # the flusher was told not to wait out its interval
        self._write_lock = threading.Lock()  # one batch written at a time, in order
        _buffered_handlers.add(self)

    def handle(self, record: logging.LogRecord) -> logging.LogRecord | bool:  # type: ignore[override]  # 3.12's signature
        """As ``Handler.handle``, without holding the handler's lock while formatting."""
        kept = self.filter(record)
        if isinstance(kept, logging.LogRecord):
            record = kept
        if kept:
            self.emit(record)
        return kept

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001  # logging's contract: a bad record is reported, never raised
            self.handleError(record)
            return
        job_line = isinstance(record.msg, str) and record.msg in JOB_LINE_MESSAGES and record.levelno <= logging.INFO
        self.append_line(line, may_wait=job_line)

    def append_line(self, line: str, *, may_wait: bool) -> None:
        """Write a formatted line (without its terminator): at the next flush when it may wait
        (a per-job line), else at once with the lines waiting before it."""
        self._pending.append(line)
        if not may_wait:
            self._write_reporting()
        elif not self._armed:
            self._arm()
        elif len(self._pending) >= self.max_pending_lines and not self._hurried:
            self._hurry()

    def _arm(self) -> None:
        # Set before the flusher is told, cleared by flush() before it takes the waiting lines:
        # a line appended after that take sees the flag clear and arms the flusher again.
        self._armed = True
        _flusher.arm(self)

    def _hurry(self) -> None:
        # max_pending_lines wait: the flusher writes them now. Not this thread: a processor
        # thread that wrote would hold the others up behind the write lock, one small write each.
        self._hurried = True
        _flusher.hurry()

    def flush(self) -> None:
        """Write the waiting lines. A closed or broken stream raises, as ``StreamHandler.flush``
        does (``logging.shutdown`` ignores it); the lines are dropped, not kept to fail again."""
        with self._write_lock:
            self._armed = self._hurried = False
            pending = self._pending
            waiting = [pending.popleft() for _ in range(len(pending))]
            stream = self.stream
            if stream is None:
                return
            if waiting:
                stream.write(self._text_of(waiting))
            if hasattr(stream, "flush"):
                stream.flush()

    def _text_of(self, waiting: list[str | _JobLine]) -> str:
        """The waiting lines as the text to write: per-job lines formatted as this handler's
        formatter formats their records (``JobLines`` chose this handler for that formatter)."""
        if type(self.formatter) is JsonFormatter:
            terminator = self.terminator
            return "".join([(line if isinstance(line, str) else _json_job_line(line)) + terminator for line in waiting])
        return _text_lines(waiting, self.terminator)

    def _write_reporting(self) -> None:
        """``flush()`` from a line's emit or the flusher: a broken stream is reported as logging
        reports a line it could not write (``handleError``), never raised."""
        try:
            self.flush()
        except (OSError, ValueError):  # a closed or broken stream: the lines are lost, logging says so
            self.handleError(logging.makeLogRecord({"msg": "buffered log lines not written"}))

    def setStream(self, stream: TextIO) -> TextIO | None:
        self.flush()  # the waiting lines go where they were meant to
        return super().setStream(stream)


#: Every BufferedStreamHandler of this process: written before a fork.
_buffered_handlers: weakref.WeakSet[BufferedStreamHandler] = weakref.WeakSet()


class _Flusher:
    """The ``jobsapp.log-flusher`` thread of this process: sleeps until a handler has a line
    waiting, lets ``flush_interval_seconds`` pass (less when a handler hurries it: it has
    ``max_pending_lines`` waiting), writes every waiting handler, sleeps again. Started at its
    first line in each process (a forked child starts its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: list[BufferedStreamHandler] = []
        self._wake = threading.Event()
        self._hurry = threading.Event()
        self._pid = 0

    def arm(self, handler: BufferedStreamHandler) -> None:
        with self._lock:
            self._due.append(handler)
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="jobsapp.log-flusher", daemon=True).start()
        self._wake.set()

    def hurry(self) -> None:
        self._hurry.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._hurry.wait(BufferedStreamHandler.flush_interval_seconds)
            with self._lock:
                self._wake.clear()
                self._hurry.clear()
                due, self._due = self._due, []
            for handler in due:
                handler._write_reporting()

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._due = []
        self._wake = threading.Event()
        self._hurry = threading.Event()
        self._pid = 0


_flusher = _Flusher()


def _flush_before_fork() -> None:
    for handler in list(_buffered_handlers):
        handler._write_reporting()


#: This process's id, without a system call per line (refreshed in a forked child).
_process_id = os.getpid()


def _after_fork_in_child() -> None:
    global _process_id
    _process_id = os.getpid()
    _flusher.after_fork_in_child()
    _text_heads.clear()  # they name the parent's pid
    _json_heads.clear()
    for handler in list(_buffered_handlers):
        handler._write_lock = threading.Lock()
        handler._pending = deque()
        handler._armed = handler._hurried = False


os.register_at_fork(before=_flush_before_fork, after_in_child=_after_fork_in_child)


#: A per-job line waiting in a ``BufferedStreamHandler``: (time in ns, thread name, logger name,
#: job class, jid, queue, elapsed seconds: None for the start line).
_JobLine = tuple[int, str, str, str, str, str, "float | None"]
#: How long ``JobLines`` keeps its answer to "which handlers, and are they all ours" before it
#: walks the loggers again (and at once after ``configure``).
DIRECT_RECHECK_NANOSECONDS = 100_000_000


class JobLines:
    """The per-job lines of a logger (``jobsapp.processor``): ``started`` and ``finished`` make
    the records ``logger.info(message, *args, extra=fields)`` would make, for less (see the
    module's header); when every handler the record would reach is a ``BufferedStreamHandler``
    with this module's formatter, no record at all: the handlers keep the line's fields and
    their flusher formats them. The caller asks ``logger.isEnabledFor(logging.INFO)`` first."""

    STARTED = "class=%s jid=%s queue=%s start"
    FINISHED = "class=%s jid=%s queue=%s elapsed_ms=%.1f done"

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._name = logger.name
        #: thread id -> (process id, thread name, the record fields that stay the same in that thread)
        self._per_thread: dict[int, tuple[int, str, dict[str, Any]]] = {}
        #: ``_direct_handlers()``'s answer, taken again once ``_recheck_at`` (ns) has passed or
        #: ``configure`` ran (``_generation``): a walk of the loggers per line cost more than the line.
        self._direct: list[BufferedStreamHandler] | None = None
        self._recheck_at = 0
        self._generation = -1
        #: The name of the thread a line comes from, read once per thread (``threading.current_thread()``
        #: per line cost a tenth of the line); a thread renamed after its first line keeps its first name.
        self._thread = threading.local()

    def started(self, class_name: str, jid: str, queue: str) -> None:
        nanoseconds = time.time_ns()
        direct = self._direct if nanoseconds < self._recheck_at and self._generation == _generation else self._recheck(nanoseconds)
        if direct is None:
            self._handle(self.STARTED, (class_name, jid, queue), nanoseconds)
            return
        try:
            thread = self._thread.name
        except AttributeError:  # this thread's first line
            thread = self._thread.name = threading.current_thread().name
        line = (nanoseconds, thread, self._name, class_name, jid, queue, None)
        for handler in direct:  # the handler's queue, appended here: this runs twice per job
            pending = handler._pending
            pending.append(line)
            if not handler._armed:
                handler._arm()
            elif len(pending) >= handler.max_pending_lines and not handler._hurried:
                handler._hurry()

    def finished(self, class_name: str, jid: str, queue: str, elapsed_seconds: float) -> None:
        nanoseconds = time.time_ns()
        direct = self._direct if nanoseconds < self._recheck_at and self._generation == _generation else self._recheck(nanoseconds)
        if direct is None:
            self._handle(self.FINISHED, (class_name, jid, queue, round(elapsed_seconds * 1000, 1)), nanoseconds)
            return
        try:
            thread = self._thread.name
        except AttributeError:  # this thread's first line
            thread = self._thread.name = threading.current_thread().name
        line = (nanoseconds, thread, self._name, class_name, jid, queue, elapsed_seconds)
        for handler in direct:  # as in started()
            pending = handler._pending
            pending.append(line)
            if not handler._armed:
                handler._arm()
            elif len(pending) >= handler.max_pending_lines and not handler._hurried:
                handler._hurry()

    def _recheck(self, nanoseconds: int) -> list[BufferedStreamHandler] | None:
        self._generation = _generation
        self._recheck_at = nanoseconds + DIRECT_RECHECK_NANOSECONDS
        self._direct = self._direct_handlers()
        return self._direct

    @staticmethod
    def _fields(args: tuple[Any, ...]) -> dict[str, Any]:
        """The ``extra`` fields of a line: its class, jid, queue and, when done, ``elapsed_ms``."""
        fields = {"job_class": args[0], "jid": args[1], "queue": args[2]}
        if len(args) > 3:
            fields["elapsed_ms"] = args[3]
        return fields

    def _handle(self, message: str, args: tuple[Any, ...], nanoseconds: int) -> None:
        """The record ``logger.info`` would make, handed to ``Logger.handle``."""
        caller = sys._getframe(2)  # the caller of started() or finished()
        record = _new_record()
        values = record.__dict__
        values.update(self._thread_fields())
        code = caller.f_code
        values["pathname"] = code.co_filename
        values["filename"], values["module"] = _file_and_module(code.co_filename)
        values["funcName"] = code.co_name
        values["lineno"] = caller.f_lineno
        values["msg"] = message
        values["args"] = args
        values["created"] = nanoseconds / 1e9
        values["msecs"] = (nanoseconds % 1_000_000_000) // 1_000_000 + 0.0
        values["relativeCreated"] = (nanoseconds - logging._startTime) / 1e6  # type: ignore[attr-defined]  # as LogRecord's
        values.update(self._fields(args))
        self.logger.handle(record)

    def _direct_handlers(self) -> list[BufferedStreamHandler] | None:
        """The handlers an INFO record of this logger would reach, when each is a
        ``BufferedStreamHandler`` formatting with ``TextFormatter`` or ``JsonFormatter`` and
        filtering with ``JobContextFilter`` only (runworkers' own handler, or a project's
        ``LOGGING`` naming them): their lines can be made without a record. Else None: another
        handler (a project's, pytest's ``caplog``) gets the record itself."""
        logger: logging.Logger | None = self.logger
        if logger is None or logger.filters or logger.disabled or not (logging.logThreads and logging.logProcesses):
            return None
        found: list[BufferedStreamHandler] = []
        while logger is not None:
            for handler in logger.handlers:
                if handler.level > logging.INFO:
                    continue
                if type(handler) is not BufferedStreamHandler or type(handler.formatter) not in _DIRECT_FORMATTERS:
                    return None
                if any(type(each) is not JobContextFilter for each in handler.filters):
                    return None
                found.append(handler)
            logger = logger.parent if logger.propagate else None
        return found if found else None  # none: logging's last resort decides, as for any record

    def _thread_fields(self) -> dict[str, Any]:
        ident = threading.get_ident()
        name = threading.current_thread().name
        known = self._per_thread.get(ident)
        if known is None or known[0] != _process_id or known[1] != name:
            probe = logging.LogRecord(self.logger.name, logging.INFO, "", 0, "", (), None)  # what logging would say
            fields = {
                "name": self.logger.name,
                "levelno": logging.INFO,
                "levelname": logging.getLevelName(logging.INFO),
                "exc_info": None,
                "exc_text": None,
                "stack_info": None,
                "thread": probe.thread,
                "threadName": probe.threadName,
                "process": probe.process,
                "processName": probe.processName,
                "taskName": None,
            }
            if not hasattr(probe, "taskName"):  # Python 3.11's records have no taskName
                del fields["taskName"]
            known = self._per_thread[ident] = (_process_id, name, fields)
        asyncio = sys.modules.get("asyncio")
        # logging.logAsyncioTasks and a record's taskName are Python 3.12+ (3.11 has neither)
        if getattr(logging, "logAsyncioTasks", False) and asyncio is not None and asyncio._get_running_loop() is not None:
            task = asyncio.current_task()
            return {**known[2], "taskName": task.get_name() if task is not None else None}
        return known[2]


def _text_lines(waiting: list[str | _JobLine], terminator: str) -> str:
    """``waiting`` as ``TextFormatter`` formats the records (a per-job line has a jid, so
    ``JobContextFilter``'s context is empty), each line ended by ``terminator``: a stamp made
    once per millisecond, the head (pid, thread, level, logger) once per thread and logger."""
    parts: list[str] = []
    add = parts.append
    last_millisecond = -1
    stamp = ""
    heads = _text_heads
    for line in waiting:
        if isinstance(line, str):
            add(line + terminator)
            continue
        nanoseconds, thread, logger_name, class_name, jid, queue, elapsed_seconds = line
        millisecond = nanoseconds // 1_000_000
        if millisecond != last_millisecond:
            last_millisecond = millisecond
            stamp = utc_stamp(millisecond // 1000, millisecond % 1000)
        head = heads.get((thread, logger_name))
        if head is None:
            head = heads[(thread, logger_name)] = f" pid={_process_id} tid={thread} INFO {logger_name}: "
        if elapsed_seconds is None:  # JobLines.STARTED
            add(f"{stamp}{head}class={class_name} jid={jid} queue={queue} start{terminator}")
        else:  # JobLines.FINISHED ("%.1f" of the rounded milliseconds is "%.1f" of the milliseconds)
            add(f"{stamp}{head}class={class_name} jid={jid} queue={queue} elapsed_ms={elapsed_seconds * 1000:.1f} done{terminator}")
    return "".join(parts)


#: (thread name, logger name) -> the text between a per-job line's stamp and its message.
_text_heads: dict[tuple[str, str], str] = {}


def _json_job_line(job_line: _JobLine) -> str:
    """The line ``JsonFormatter`` makes of a per-job line's record (its fields in the same order,
    encoded as its encoder encodes them), written from a template: the head (pid, thread, level,
    logger) encoded once per thread and logger, each string field by the encoder's own quoting."""
    nanoseconds, thread, logger_name, class_name, jid, queue, elapsed_seconds = job_line
    if type(class_name) is not str or type(jid) is not str or type(queue) is not str:
        return _json_job_document(job_line)  # not what a registered job's line holds: the encoder decides
    stamp = utc_stamp(nanoseconds // 1_000_000_000, (nanoseconds % 1_000_000_000) // 1_000_000)
    head = _json_heads.get((thread, logger_name))
    if head is None:
        head = _json_heads[(thread, logger_name)] = (
            f',"pid":{_process_id},"thread":{_quote(thread)},"level":"INFO","logger":{_quote(logger_name)},"message":'
        )
    fields = f'"job_class":{_quote(class_name)},"jid":{_quote(jid)},"queue":{_quote(queue)}'
    if elapsed_seconds is None:
        message = f"class={class_name} jid={jid} queue={queue} start"
        return f'{{"time":"{stamp}"{head}{_quote(message)},{fields}}}'
    elapsed_ms = round(elapsed_seconds * 1000, 1)
    message = f"class={class_name} jid={jid} queue={queue} elapsed_ms={elapsed_ms:.1f} done"
    return f'{{"time":"{stamp}"{head}{_quote(message)},{fields},"elapsed_ms":{float.__repr__(elapsed_ms)}}}'


def _json_job_document(job_line: _JobLine) -> str:
    """``_json_job_line`` through the encoder, for fields of any type."""
    nanoseconds, thread, logger_name, class_name, jid, queue, elapsed_seconds = job_line
    stamp = utc_stamp(nanoseconds // 1_000_000_000, (nanoseconds % 1_000_000_000) // 1_000_000)
    document = {"time": stamp, "pid": _process_id, "thread": thread, "level": "INFO", "logger": logger_name}
    if elapsed_seconds is None:
        document["message"] = f"class={class_name} jid={jid} queue={queue} start"
        return _encode_json({**document, "job_class": class_name, "jid": jid, "queue": queue})
    elapsed_ms = round(elapsed_seconds * 1000, 1)
    document["message"] = f"class={class_name} jid={jid} queue={queue} elapsed_ms={elapsed_ms:.1f} done"
    return _encode_json({**document, "job_class": class_name, "jid": jid, "queue": queue, "elapsed_ms": elapsed_ms})


#: (thread name, logger name) -> the JSON between a per-job line's time and its message.
_json_heads: dict[tuple[str, str], str] = {}
#: How ``_encode_json`` quotes a string (``ensure_ascii``, the encoder's default).
_quote = encode_basestring_ascii


_DIRECT_FORMATTERS = (TextFormatter, JsonFormatter)
#: The messages of the per-job lines: a BufferedStreamHandler lets these wait for its flusher.
JOB_LINE_MESSAGES = frozenset({JobLines.STARTED, JobLines.FINISHED})


def _new_record() -> logging.LogRecord:
    return logging.LogRecord.__new__(logging.LogRecord)


_files: dict[str, tuple[str, str]] = {}


def _file_and_module(pathname: str) -> tuple[str, str]:
    known = _files.get(pathname)
    if known is None:
        filename = os.path.basename(pathname)
        known = _files[pathname] = (filename, os.path.splitext(filename)[0])
    return known


#: The handler ``configure`` installed (so a second call replaces it instead of doubling lines).
_installed: BufferedStreamHandler | None = None
#: Moved by each ``configure``: ``JobLines`` then looks at the handlers again at its next line.
_generation = 0


def configure(*, verbosity: int = 1, log_format: str = "text", stream: TextIO | None = None) -> logging.Handler | None:
    """Set up logging for a worker; returns the handler installed, if any. In a project without
    logging configuration the handler goes on the root logger, so users' loggers print through
    it too: ``jobsapp`` at the ``-v`` level, the root at INFO (WARNING at ``-v 0``)."""
    global _installed, _generation
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(FORMATS)}")
    logger = logging.getLogger(LOGGER_NAME)
    root = logging.getLogger()
    _generation += 1
    if _installed is not None:
        _installed._write_reporting()  # its waiting lines, before it goes
        root.removeHandler(_installed)
        _installed = None
    if project_configured(logger):
        if verbosity != 1:  # the project's own level stands unless -v says otherwise
            logger.setLevel(level_for(verbosity))
        return None
    handler = BufferedStreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(JobContextFilter())
    root.addHandler(handler)
    root.setLevel(min(level_for(verbosity), logging.INFO) if verbosity > 0 else logging.WARNING)
    logger.setLevel(level_for(verbosity))
    _installed = handler
    return handler
