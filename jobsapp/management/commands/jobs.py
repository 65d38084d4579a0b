"""``python manage.py jobs``: the operators' command line, a thin edge over ``jobsapp.api``.

Subcommands: ``stats``, ``queues``, ``processes``, ``retry`` / ``dead`` (``list``, ``retry-all``,
``clear``), ``schedule``, ``pause`` / ``resume QUEUE``, ``quiet`` / ``stop IDENTITY``. Output is
an aligned table, or JSON with ``--json`` (one document per call, for scripts). Arguments are
shown redacted and truncated, as in the dashboard. ``clear`` asks for ``--yes``: it deletes jobs.
Redis down is a CommandError naming the server, exit status 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobsapp import api
from jobsapp.errors import RedisUnavailable

ARGS_MAX_CHARS = 60


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, numeric: Sequence[str] = ()) -> str:
    """Columns padded to their widest cell; numeric columns right-aligned."""
    cells = [[str(header) for header in headers]] + [
        ["" if cell is None else str(cell) for cell in row] for row in rows
    ]
    widths = [max(len(row[index]) for row in cells) for index in range(len(headers))]
    lines = []
    for row_number, row in enumerate(cells):
        parts = [
            cell.rjust(width) if headers[index] in numeric else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
        if row_number == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _iso(epoch: float | None) -> str:
    if not epoch:
        return ""
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _entry_json(entry: api.SortedEntry) -> dict[str, Any]:
    return {
        "jid": entry.jid,
        "class": entry.display_class,
        "queue": entry.queue,
        "at": entry.score,
        "args": entry.display_args,
        "kwargs": entry.display_kwargs,
        "error_class": entry.error_class or None,
        "error_message": entry.error_message or None,
        "retry_count": entry.retry_count,
        "key": entry.key,
    }


class Command(BaseCommand):
    help = "Inspect and operate the jobs in Redis: stats, queues, processes, retries, dead jobs, schedule."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        commands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

        def add(name: str, **kwargs: Any) -> CommandParser:
            subparser = commands.add_parser(name, **kwargs)
            # Also accepted after the subcommand; SUPPRESS keeps a --json given before it.
            subparser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
            return subparser

        add("stats", help="counters: processed, failed, enqueued, busy, sets")
        add("queues", help="queues with size, latency and pause state")
        add("processes", help="live worker processes (Ruby Sidekiq ones included)")
        for name, what in (("retry", "the retry set"), ("dead", "the dead set")):
            set_parser = add(name, help=f"list, retry or clear {what}")
            set_parser.add_argument("action", nargs="?", default="list", choices=["list", "retry-all", "clear"])
            self._filters(set_parser)
            set_parser.add_argument("--yes", action="store_true", help="confirm clear")
        schedule_parser = add("schedule", help="list scheduled jobs")
        self._filters(schedule_parser)
        for name, what in (("pause", "stop fetching from"), ("resume", "resume fetching from")):
            add(name, help=f"{what} a queue").add_argument("queue")
        for name, what in (("quiet", "TSTP: stop fetching"), ("stop", "TERM: shut down")):
            add(name, help=f"signal a process ({what})").add_argument("identity")

    @staticmethod
    def _filters(parser: CommandParser) -> None:
        parser.add_argument("--class", dest="class_name", default=None, help="only this job class")
        parser.add_argument("--grep", default=None, help="only jobs whose args/error/jid contain this text")
        parser.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")

    def handle(self, *args: Any, **options: Any) -> None:
        self.as_json = bool(options["json"])
        handler = getattr(self, "do_" + options["subcommand"])
        try:
            handler(options)
        except RedisUnavailable as error:  # nothing was changed
            raise CommandError(str(error)) from error

    def emit(
        self, document: Any, headers: Sequence[str], rows: Sequence[Sequence[Any]], *, numeric: Sequence[str] = ()
    ) -> None:
        if self.as_json:
            self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False, default=str))
        elif rows:
            self.stdout.write(render_table(headers, rows, numeric=numeric))
        else:
            self.stdout.write("(none)")

    def say(self, document: dict[str, Any], text: str) -> None:
        self.stdout.write(json.dumps(document) if self.as_json else text)

    # --- reading ------------------------------------------------------------------------

    def do_stats(self, options: dict[str, Any]) -> None:
        stats = api.Stats.fetch()
        document = {
            "processed": stats.processed,
            "failed": stats.failed,
            "enqueued": stats.enqueued,
            "busy": stats.busy,
            "processes": stats.processes_size,
            "scheduled": stats.scheduled_size,
            "retries": stats.retry_size,
            "dead": stats.dead_size,
            "default_queue_latency_seconds": round(stats.default_queue_latency, 3),
            "paused_queues": stats.paused_queues,
        }
        rows = [(name, ", ".join(value) if isinstance(value, list) else value) for name, value in document.items()]
        self.emit(document, ["stat", "value"], rows, numeric=["value"])

    def do_queues(self, options: dict[str, Any]) -> None:
        summaries = api.Queue.summaries()
        document = [
            {
                "name": queue.name,
                "size": queue.size,
                "latency_seconds": round(queue.latency_seconds, 3),
                "paused": queue.paused,
            }
            for queue in summaries
        ]
        rows = [
            (queue.name, queue.size, f"{queue.latency_seconds:.1f}", "paused" if queue.paused else "")
            for queue in summaries
        ]
        self.emit(document, ["queue", "size", "latency_s", "state"], rows, numeric=["size", "latency_s"])

    def do_processes(self, options: dict[str, Any]) -> None:
        now = time.time()
        processes = api.ProcessSet.all()
        document = [
            {
                "identity": process.identity,
                "hostname": process.hostname,
                "pid": process.pid,
                "tag": process.tag,
                "queues": process.queues,
                "concurrency": process.concurrency,
                "busy": process.busy,
                "rss_kb": process.rss_kb,
                "beat": process.beat,
                "quiet": process.quiet,
                "started_at": process.started_at,
            }
            for process in processes
        ]
        rows = [
            (
                process.identity,
                process.tag,
                ",".join(process.queues),
                process.concurrency,
                process.busy,
                process.rss_kb // 1024,
                f"{process.seconds_since_beat(now=now):.0f}s ago",
                "quiet" if process.quiet else "",
            )
            for process in processes
        ]
        headers = ["identity", "tag", "queues", "threads", "busy", "rss_mb", "beat", "state"]
        self.emit(document, headers, rows, numeric=["threads", "busy", "rss_mb"])

    def _list(self, job_set: api.JobSet, options: dict[str, Any]) -> None:
        limit = max(int(options["limit"]), 1)
        page = job_set.page(1, limit, class_name=options["class_name"], substring=options["grep"])
        document = {"total": page.total, "jobs": [_entry_json(entry) for entry in page.entries]}
        with_errors = not isinstance(job_set, api.ScheduledSet)
        rows = []
        for entry in page.entries:
            row: list[Any] = [
                _iso(entry.score),
                entry.jid,
                entry.display_class,
                entry.queue,
                entry.args_preview(ARGS_MAX_CHARS),
            ]
            if with_errors:
                row += [entry.error_class, (entry.error_message or "")[:60], entry.retry_count]
            rows.append(row)
        headers = ["at", "jid", "class", "queue", "args"] + (
            ["error", "message", "retries"] if with_errors else []
        )
        self.emit(document, headers, rows, numeric=["retries"])
        if not self.as_json and page.total > len(page.entries):
            self.stdout.write(f"({len(page.entries)} of {page.total} shown; use --limit)")

    def _set_command(self, job_set: api.JobSet, options: dict[str, Any]) -> None:
        action = options["action"]
        if action == "list":
            self._list(job_set, options)
        elif action == "retry-all":
            count = job_set.retry_all(class_name=options["class_name"], substring=options["grep"])
            self.say({"retried": count}, f"{count} jobs moved to their queues.")
        else:
            if not options["yes"]:
                raise CommandError(f"clear deletes jobs from {job_set.name!r}; add --yes to confirm")
            count = job_set.delete_all(class_name=options["class_name"], substring=options["grep"])
            self.say({"deleted": count}, f"{count} jobs deleted from {job_set.name}.")

    def do_retry(self, options: dict[str, Any]) -> None:
        self._set_command(api.RetrySet(), options)

    def do_dead(self, options: dict[str, Any]) -> None:
        self._set_command(api.DeadSet(), options)

    def do_schedule(self, options: dict[str, Any]) -> None:
        self._list(api.ScheduledSet(), options)

    # --- acting -------------------------------------------------------------------------

    def do_pause(self, options: dict[str, Any]) -> None:
        api.Queue(options["queue"]).pause()
        self.say({"queue": options["queue"], "paused": True}, f"Paused {options['queue']}.")

    def do_resume(self, options: dict[str, Any]) -> None:
        api.Queue(options["queue"]).resume()
        self.say({"queue": options["queue"], "paused": False}, f"Resumed {options['queue']}.")

    def _signal(self, identity: str, action: str) -> None:
        sent = api.ProcessSet.quiet(identity) if action == "quiet" else api.ProcessSet.stop(identity)
        if not sent:
            raise CommandError(f"no live process {identity!r} (see: manage.py jobs processes)")
        self.say(
            {"identity": identity, "signal": "TSTP" if action == "quiet" else "TERM"},
            f"Sent {action} to {identity}.",
        )

    def do_quiet(self, options: dict[str, Any]) -> None:
        self._signal(options["identity"], "quiet")

    def do_stop(self, options: dict[str, Any]) -> None:
        self._signal(options["identity"], "stop")
