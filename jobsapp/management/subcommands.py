"""The ``jobs`` command's subcommands, the operators' command line: a thin edge over ``jobsapp.api``.

Subcommands: ``stats``, ``queues``, ``processes``, ``busy``, ``retry`` / ``dead`` (``list``, ``retry-all``,
``clear``), ``schedule``, ``results [JID]``, ``periodic`` (``list``, ``enable`` / ``disable`` /
``run NAME``), ``limits``, ``unique``, ``batch BID``, ``batches``, ``outbox`` (the transactional outbox:
entries waiting, the oldest one's age, the parked ones with their reasons), ``pause`` / ``resume QUEUE``,
``quiet`` / ``stop IDENTITY``, ``cancel JID...`` (stop running jobs, remove waiting ones: ``api.cancel_many``), and the
subcommands other installed apps add (an app config's ``jobs_subcommands()``: tracking's
``task-cancel ID``). Output is
an aligned table, or JSON with ``--json`` (one document per call, for scripts). Arguments are
shown redacted and truncated, as in the dashboard. ``clear`` asks for ``--yes``: it deletes jobs.
Redis down is a CommandError naming the server, exit status 1. ``--shard NAME`` (before the
subcommand) looks at one Redis of ``JOBSAPP["SHARDS"]`` instead of the default one.

Two doors run them: ``manage.py jobs`` (``commands/jobs.py``: a Django command, after Django's
full start-up) and ``python -m jobsapp``, whose read subcommands run here on the settings alone
(``run_on_settings_alone``) with the same options, output and errors, without Django's management
machinery: its package imports every system check (mail, templates, caches), a fifth of a read's
start-up. So nothing here imports ``django.core.management``; a subcommand that cannot do what it
is asked raises ``SubcommandError``, which each door reports as Django reports a CommandError.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TextIO

from django.apps import apps

from jobsapp import api, shards
from jobsapp.errors import RedisUnavailable, UnknownShard

ARGS_MAX_CHARS = 60


class SubcommandError(Exception):
    """A subcommand that cannot do what it was asked (Redis down, a missing ``--yes``, an unknown
    name): its message is the whole answer, exit status 1, as a Django CommandError."""


#: Subcommands (and, for the sets, actions) that only read Redis: ``python -m jobsapp`` runs them
#: on the settings alone, without ``django.setup()`` (``jobsapp.__main__``). A subcommand not
#: named here gets the full start-up.
READ_ONLY: dict[str, frozenset[str] | None] = {
    "stats": None,
    "queues": None,
    "processes": None,
    "busy": None,
    "retry": frozenset({"list"}),
    "dead": frozenset({"list"}),
    "schedule": None,
    "results": None,
    "limits": None,
    "batch": None,
    "batches": None,
    "unique": frozenset({"list"}),
    "cluster": None,
}


#: The options that take a value as the next word (``--limit 5``), before or after the subcommand.
VALUE_OPTIONS = frozenset({"--shard", "--settings", "--pythonpath", "--class", "--grep", "--limit", "--from", "--status"})


#: What an installed app's ``jobs_subcommands()`` returns, one per subcommand: its name, its help
#: line, a function adding its arguments to its parser, and its handler, which takes the parsed
#: options and returns (a JSON document, a text) or raises CommandError (or SubcommandError).
Subcommand = tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[dict[str, Any]], tuple[Any, str]]]


def installed_subcommands() -> list[Subcommand]:
    """The subcommands installed apps add (an app config's ``jobs_subcommands()``), once the app
    registry is ready (``python -m jobsapp``'s reads run without it, and need none of them)."""
    if not apps.ready:
        return []
    found: list[Subcommand] = []
    for config in apps.get_app_configs():
        provider = getattr(config, "jobs_subcommands", None)
        if callable(provider):
            found.extend(provider())
    return found


def runs_on_settings_alone(arguments: Sequence[str]) -> bool:
    """True when the ``jobs`` arguments (what follows ``jobs``) name a read-only subcommand, which
    needs the settings and Redis but none of Django's apps. The action of ``retry``, ``dead`` and
    ``unique`` is the first word after the subcommand (``list`` when there is none). A call for
    the help or the version is Django's to answer, in its own words."""
    if any(word in ("-h", "--help", "--version") for word in arguments):
        return False
    words: list[str] = []
    value_follows = False
    for word in arguments:
        if value_follows:
            value_follows = False
        elif word in VALUE_OPTIONS:
            value_follows = True
        elif not word.startswith("-"):
            words.append(word)
    if not words or words[0] not in READ_ONLY:
        return False
    actions = READ_ONLY[words[0]]
    return actions is None or (words[1] if len(words) > 1 else "list") in actions


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, numeric: Sequence[str] = ()) -> str:
    """Columns padded to their widest cell; numeric columns right-aligned."""
    cells = [[str(header) for header in headers]] + [["" if cell is None else str(cell) for cell in row] for row in rows]
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
    """ISO 8601 UTC; "" for no time and for a time no calendar holds (a score of 1e308, inf, nan
    written by another client)."""
    if not epoch:
        return ""
    try:
        return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return ""


def _finite(number: float) -> float | None:
    """A score as a JSON number, or null when it is inf or nan (JSON has neither)."""
    return number if math.isfinite(number) else None


def _entry_json(entry: api.SortedEntry) -> dict[str, Any]:
    return {
        "jid": entry.jid,
        "class": entry.display_class,
        "queue": entry.queue,
        "at": _finite(entry.score),
        "args": entry.display_args,
        "kwargs": entry.display_kwargs,
        "error_class": entry.error_class or None,
        "error_message": entry.error_message or None,
        "retry_count": entry.retry_count,
        "key": entry.key,
    }


class Subcommands:
    """The subcommands' arguments (``add_arguments``) and their handlers (``handle``), writing to
    ``self.stdout`` (a Django ``OutputWrapper``, or ``Output``): a base of the Django command, and
    the whole of a read run on the settings alone."""

    help = "Inspect and operate the jobs in Redis: stats, queues, processes, retries, dead jobs, schedule."
    stdout: Any  # Django's OutputWrapper under manage.py, an Output on the settings alone

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.add_argument("--shard", default=None, help="the Redis of JOBSAPP['SHARDS'] to look at (default: 'default')")
        commands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

        def add(name: str, **kwargs: Any) -> argparse.ArgumentParser:
            subparser = commands.add_parser(name, **kwargs)
            # Also accepted after the subcommand; SUPPRESS keeps a --json given before it.
            subparser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
            return subparser

        add("stats", help="counters: processed, failed, enqueued, busy, sets")
        add("queues", help="queues with size, latency and pause state")
        add("processes", help="live worker processes (Ruby Sidekiq ones included)")
        add("busy", help="running jobs: process, thread, how long, and a timeout they overrun")
        for name, what in (("retry", "the retry set"), ("dead", "the dead set")):
            set_parser = add(name, help=f"list, retry or clear {what}")
            set_parser.add_argument("action", nargs="?", default="list", choices=["list", "retry-all", "clear"])
            self._filters(set_parser)
            set_parser.add_argument("--yes", action="store_true", help="confirm clear")
        schedule_parser = add("schedule", help="list scheduled jobs")
        self._filters(schedule_parser)
        results_parser = add("results", help="finished jobs pushed with retain, or one job's result by jid")
        results_parser.add_argument("jid", nargs="?", default=None, help="show this job's result (any status)")
        results_parser.add_argument("--status", choices=["succeeded", "failed"], default=None, help="only this outcome")
        results_parser.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
        periodic_parser = add("periodic", help="periodic jobs (ours and sidekiq-cron's): list, enable, disable, run now")
        periodic_parser.add_argument("action", nargs="?", default="list", choices=["list", "enable", "disable", "run"])
        periodic_parser.add_argument("name", nargs="?", help="the periodic job (for enable, disable, run)")
        add("limits", help="rate and concurrency limiters: limit, in use, refusals")
        add("cluster", help="on a Redis Cluster: each partition's hash tag, slot and the master serving it")
        add("batch", help="a Redis-only batch (jobsapp.batch): counts, callbacks, failed and pending jids").add_argument("bid")
        add("batches", help="Redis-only batches, newest first").add_argument("--limit", type=int, default=50, help="at most this many rows")
        outbox_parser = add("outbox", help="the transactional outbox: entries waiting, the oldest one's age, parked entries and why")
        outbox_parser.add_argument("action", nargs="?", default="list", choices=["list", "retry", "discard"])
        outbox_parser.add_argument("entry", nargs="?", type=int, help="the parked entry's id (for retry, discard)")
        outbox_parser.add_argument("--yes", action="store_true", help="confirm discard")
        unique_parser = add("unique", help="live locks of unique jobs: list, or release DIGEST by hand")
        unique_parser.add_argument("action", nargs="?", default="list", choices=["list", "release"])
        unique_parser.add_argument("digest", nargs="?", help="the lock to release")
        for name, what in (("pause", "stop fetching from"), ("resume", "resume fetching from")):
            add(name, help=f"{what} a queue").add_argument("queue")
        for name, what in (("quiet", "TSTP: stop fetching"), ("stop", "TERM: shut down")):
            add(name, help=f"signal a process ({what})").add_argument("identity")
        cancel_parser = add("cancel", help="cancel jobs by jid: a running one stops within a second, a waiting one is removed")
        cancel_parser.add_argument("jids", nargs="+", metavar="JID")
        self.extensions: dict[str, Callable[[dict[str, Any]], tuple[Any, str]]] = {}
        for name, text, add_arguments, handle in installed_subcommands():
            add_arguments(add(name, help=text))
            self.extensions[name] = handle

    @staticmethod
    def _filters(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--class", dest="class_name", default=None, help="only this job class")
        parser.add_argument("--grep", default=None, help="only jobs whose args/error/jid contain this text")
        parser.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
        parser.add_argument(
            "--from",
            dest="from_rank",
            type=int,
            default=0,
            help="with --class/--grep: where to continue looking (printed when a search stops before the end of a big set)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.as_json = bool(options["json"])
        extension = getattr(self, "extensions", {}).get(options["subcommand"])
        handler = getattr(self, "do_" + options["subcommand"]) if extension is None else partial(self._extension, extension)
        try:
            with shards.using(options.get("shard") or shards.current()):
                handler(options)
        except (RedisUnavailable, UnknownShard) as error:  # nothing was changed
            raise SubcommandError(str(error)) from error

    def _extension(self, handle: Callable[[dict[str, Any]], tuple[Any, str]], options: dict[str, Any]) -> None:
        """An installed app's subcommand: its handler returns (JSON document, text)."""
        document, text = handle(options)
        self.stdout.write(json.dumps(document, indent=2, default=str) if self.as_json else text)

    def emit(self, document: Any, headers: Sequence[str], rows: Sequence[Sequence[Any]], *, numeric: Sequence[str] = ()) -> None:
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

    def do_cluster(self, options: dict[str, Any]) -> None:
        found = api.partitions()
        document = [{"partition": part.index, "tag": part.tag, "slot": part.slot, "master": part.master} for part in found]
        if not found and not self.as_json:
            self.stdout.write("not a Redis Cluster (JOBSAPP['REDIS_CLUSTER'] is off): every key is on the one server")
            return
        rows = [(part.index, part.tag, part.slot, part.master) for part in found]
        self.emit(document, ["partition", "tag", "slot", "master"], rows, numeric=["partition", "slot"])

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
        rows = [(queue.name, queue.size, f"{queue.latency_seconds:.1f}", "paused" if queue.paused else "") for queue in summaries]
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

    def do_busy(self, options: dict[str, Any]) -> None:
        """The running jobs, longest first (the dashboard's Busy page, for a shell)."""
        now = time.time()
        running = api.WorkSet.all()
        document = [
            {
                "identity": work.identity,
                "thread": work.thread_id,
                "jid": work.record.jid,
                "class": work.record.display_class,
                "queue": work.queue,
                "args": work.record.display_args,
                "run_at": work.run_at,
                "elapsed_seconds": round(work.elapsed_seconds(now=now), 1),
                "timeout_seconds": work.timeout_seconds,
                "overrunning": work.overrunning(now=now),
            }
            for work in running
        ]
        rows = [
            (
                work.identity,
                work.thread_id,
                work.record.jid,
                work.record.display_class,
                work.queue,
                work.record.args_preview(ARGS_MAX_CHARS),
                f"{work.elapsed_seconds(now=now):.0f}s",
                "" if work.timeout_seconds is None else f"{work.timeout_seconds:g}s",
                "overrunning" if work.overrunning(now=now) else "",
            )
            for work in running
        ]
        headers = ["identity", "thread", "jid", "class", "queue", "args", "running", "timeout", "state"]
        self.emit(document, headers, rows, numeric=["running", "timeout"])

    def _list(self, job_set: api.JobSet, options: dict[str, Any]) -> None:
        limit = max(int(options["limit"]), 1)
        search = None
        if options["class_name"] or options["grep"]:
            # bounded: examines at most api.FILTER_SCAN_BUDGET entries, then says where to go on
            search = job_set.search(
                class_name=options["class_name"], substring=options["grep"], start_rank=options.get("from_rank") or 0, limit=limit
            )
            page = api.Page(search.entries, len(search.entries), 1, limit)
        else:
            page = job_set.page(1, limit)
        document: dict[str, Any] = {"total": page.total, "jobs": [_entry_json(entry) for entry in page.entries]}
        if search is not None:
            document.update(scanned_from=search.start_rank, scanned_to=search.end_rank, size=search.size, next_from=search.next_rank)
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
        headers = ["at", "jid", "class", "queue", "args"] + (["error", "message", "retries"] if with_errors else [])
        self.emit(document, headers, rows, numeric=["retries"])
        if self.as_json:
            return
        if search is not None:
            more = f"; look further with --from {search.next_rank}" if search.next_rank is not None else ""
            self.stdout.write(f"({len(page.entries)} matching among jobs {search.start_rank + 1}-{search.end_rank} of {search.size}{more})")
        elif page.total > len(page.entries):
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
                raise SubcommandError(f"clear deletes jobs from {job_set.name!r}; add --yes to confirm")
            count = job_set.delete_all(class_name=options["class_name"], substring=options["grep"])
            self.say({"deleted": count}, f"{count} jobs deleted from {job_set.name}.")

    def do_retry(self, options: dict[str, Any]) -> None:
        self._set_command(api.RetrySet(), options)

    def do_dead(self, options: dict[str, Any]) -> None:
        self._set_command(api.DeadSet(), options)

    def do_schedule(self, options: dict[str, Any]) -> None:
        self._list(api.ScheduledSet(), options)

    def do_results(self, options: dict[str, Any]) -> None:
        jid = options["jid"]
        if jid:
            result = api.CompletedSet.get(jid)
            if result is None:
                raise SubcommandError(f"no result kept for job {jid!r} (not pushed with retain, expired, or unknown)")
            document = {**result.as_dict(), "args": api.redact(result.args), "kwargs": api.redact(result.kwargs)}
            if self.as_json:
                self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False, default=str))
            else:
                rows: list[tuple[Any, ...]] = [
                    (name, "" if value is None else _iso(value) if name.endswith("_at") else value) for name, value in document.items()
                ]
                self.stdout.write(render_table(["field", "value"], rows))
                if result.error_traceback:
                    self.stdout.write(result.error_traceback.rstrip())
            return
        page = api.CompletedSet().page(1, max(int(options["limit"]), 1), status=options["status"])
        document_list = [
            {**result.as_dict(), "args": api.redact(result.args), "kwargs": api.redact(result.kwargs)} for result in page.entries
        ]
        rows = [
            (
                _iso(result.finished_at),
                result.jid,
                result.job_class,
                result.status,
                result.attempts,
                json.dumps(api.redact(result.args), ensure_ascii=False)[:ARGS_MAX_CHARS],
                (result.error_class if result.failed else json.dumps(result.value, ensure_ascii=False, default=str))[:ARGS_MAX_CHARS],
            )
            for result in page.entries
        ]
        headers = ["finished", "jid", "class", "status", "attempts", "args", "result"]
        self.emit({"total": page.total, "jobs": document_list}, headers, rows, numeric=["attempts"])
        if not self.as_json and page.total > len(page.entries):
            self.stdout.write(f"({len(page.entries)} of {page.total} shown; use --limit)")

    def do_periodic(self, options: dict[str, Any]) -> None:
        action, name = options["action"], options["name"]
        if action == "list":
            jobs = api.PeriodicSet.all()
            document = [
                {
                    "name": job.name,
                    "class": job.job_class,
                    "schedule": job.schedule,
                    "queue": job.queue,
                    "enabled": job.enabled,
                    "source": "jobsapp" if job.ours else "sidekiq-cron",
                    "last_enqueued_at": job.last_enqueued_at,
                    "next_run_at": job.next_run_at,
                    "last_outcome": job.last_outcome or None,
                    "malformed": job.malformed,
                }
                for job in jobs
            ]
            rows = [
                (
                    job.name,
                    job.job_class,
                    job.schedule,
                    job.queue,
                    ("malformed: " + ", ".join(job.malformed)) if job.malformed else "enabled" if job.enabled else "disabled",
                    _iso(job.last_enqueued_at),
                    _iso(job.next_run_at),
                    job.last_outcome,
                )
                for job in jobs
            ]
            self.emit(document, ["name", "class", "schedule", "queue", "state", "last_run", "next_run", "last_outcome"], rows)
            return
        if not name:
            raise SubcommandError(f"periodic {action} needs the job's name (see: manage.py jobs periodic)")
        if action == "run":
            try:
                jid = api.PeriodicSet.run_now(name)
            except ValueError as exc:  # a stored message another client broke: nothing was pushed
                raise SubcommandError(str(exc)) from None
            if jid is None:
                raise SubcommandError(f"no periodic job {name!r} (see: manage.py jobs periodic)")
            self.say({"name": name, "jid": jid}, f"Enqueued {name} now as {jid}.")
            return
        if not api.PeriodicSet.set_enabled(name, action == "enable"):
            raise SubcommandError(f"no periodic job {name!r} (see: manage.py jobs periodic)")
        self.say({"name": name, "enabled": action == "enable"}, f"{action.capitalize()}d {name}.")

    def do_limits(self, options: dict[str, Any]) -> None:
        states = api.LimiterSet.all()
        document = [
            {
                "name": state.name,
                "kind": state.kind,
                "limit": state.limit,
                "per_seconds": state.per_seconds,
                "in_use": state.in_use,
                "over_limit": state.over_limit,
            }
            for state in states
        ]
        rows = [
            (
                state.name,
                state.kind,
                state.limit,
                "" if state.per_seconds is None else f"{state.per_seconds:g}",
                state.in_use,
                state.over_limit,
            )
            for state in states
        ]
        self.emit(
            document, ["name", "kind", "limit", "per_s", "in_use", "over_limit"], rows, numeric=["limit", "per_s", "in_use", "over_limit"]
        )

    def do_batch(self, options: dict[str, Any]) -> None:
        batch = api.BatchSet.get(options["bid"])
        if batch is None:
            raise SubcommandError(f"no batch {options['bid']!r} (unknown, or expired)")
        document = {
            "bid": batch.bid,
            "description": batch.description,
            "created_at": _iso(batch.created_at),
            "status": batch.status,
            "total": batch.total,
            "pending": batch.pending,
            "succeeded": batch.succeeded,
            "failed": batch.failed,
            "complete": batch.complete,
            "success": batch.success,
            "callbacks": {f"on_{callback.kind}": {"class": callback.job_class, "state": callback.state} for callback in batch.callbacks},
            "failed_jids": batch.failed_jids,
            "pending_jids": [pending.record.jid for pending in batch.pending_jobs],
        }
        if self.as_json:
            self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False))
            return
        rows: list[tuple[Any, ...]] = [(name, value) for name, value in document.items() if not isinstance(value, (list, dict))]
        rows += [(f"on_{callback.kind}", f"{callback.job_class} ({callback.state})") for callback in batch.callbacks]
        rows += [
            ("failed_jids", " ".join(batch.failed_jids)),
            ("pending_jids", " ".join(pending.record.jid for pending in batch.pending_jobs)),
        ]
        self.stdout.write(render_table(["field", "value"], rows))

    def do_batches(self, options: dict[str, Any]) -> None:
        page = api.BatchSet.page(1, max(int(options["limit"]), 1))
        document = [
            {
                "bid": batch.bid,
                "description": batch.description,
                "created_at": _iso(batch.created_at),
                "status": batch.status,
                "total": batch.total,
                "pending": batch.pending,
                "succeeded": batch.succeeded,
                "failed": batch.failed,
            }
            for batch in page.entries
        ]
        headers = ["bid", "description", "created_at", "status", "total", "pending", "succeeded", "failed"]
        rows = [tuple(entry[name] for name in headers) for entry in document]
        self.emit(document, headers, rows, numeric=["total", "pending", "succeeded", "failed"])

    def do_outbox(self, options: dict[str, Any]) -> None:
        if options["action"] != "list":
            self._outbox_act(options["action"], options["entry"], confirmed=options["yes"])
            return
        state = api.Outbox.state()
        if state is None:
            self.say({"outbox": None}, "The outbox is off (JOBSAPP['OUTBOX']), not migrated, or its database does not answer.")
            return
        age = state.oldest_age_seconds()
        parked = api.Outbox.parked()
        document = {
            "entries": state.depth,
            "oldest_age_seconds": None if age is None else round(age, 3),
            "parked": state.parked,
            "parked_entries": [
                {"id": entry.entry_id, "kind": entry.kind, "jid": entry.jid, "parked_at": _iso(entry.parked_at), "reason": entry.reason}
                for entry in parked
            ],
        }
        if self.as_json:
            self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False))
            return
        oldest = "-" if age is None else f"{age:.1f} s"
        self.stdout.write(render_table(["outbox", "value"], [("entries", state.depth), ("oldest", oldest), ("parked", state.parked)]))
        if parked:
            rows = [(entry.entry_id, entry.kind, entry.jid, _iso(entry.parked_at), entry.reason[:ARGS_MAX_CHARS]) for entry in parked]
            self.stdout.write(render_table(["id", "kind", "jid", "parked_at", "reason"], rows, numeric=["id"]))

    def _outbox_act(self, action: str, entry_id: int | None, *, confirmed: bool) -> None:
        if entry_id is None:
            raise SubcommandError(f"outbox {action} needs a parked entry's id (see: manage.py jobs outbox)")
        if action == "discard" and not confirmed:
            raise SubcommandError("outbox discard deletes the entry: its job will never run; add --yes")
        done = api.Outbox.retry(entry_id) if action == "retry" else api.Outbox.discard(entry_id)
        if not done:
            raise SubcommandError(f"no parked outbox entry {entry_id}")
        what = "given back to the relay" if action == "retry" else "discarded"
        self.say({action: entry_id}, f"Outbox entry {entry_id} {what}.")

    def do_unique(self, options: dict[str, Any]) -> None:
        if options["action"] == "release":
            if not options["digest"]:
                raise SubcommandError("unique release needs the lock's digest (see: manage.py jobs unique)")
            if not api.UniqueLocks.release(options["digest"]):
                raise SubcommandError(f"no unique lock {options['digest']!r}")
            self.say({"released": options["digest"]}, f"Released {options['digest']}.")
            return
        locks = api.UniqueLocks.all()
        document = [{"digest": lock.digest, "jid": lock.jid, "expires_in_seconds": lock.expires_in_seconds} for lock in locks]
        rows = [(lock.digest, lock.jid, f"{lock.expires_in_seconds:.0f}") for lock in locks]
        self.emit(document, ["digest", "held_by_jid", "expires_in_s"], rows, numeric=["expires_in_s"])

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
            raise SubcommandError(f"no live process {identity!r} (see: manage.py jobs processes)")
        self.say(
            {"identity": identity, "signal": "TSTP" if action == "quiet" else "TERM"},
            f"Sent {action} to {identity}.",
        )

    def do_quiet(self, options: dict[str, Any]) -> None:
        self._signal(options["identity"], "quiet")

    def do_stop(self, options: dict[str, Any]) -> None:
        self._signal(options["identity"], "stop")

    def do_cancel(self, options: dict[str, Any]) -> None:
        answers = api.cancel_many(options["jids"])
        document = [{"jid": answer.jid, "outcome": answer.outcome, "where": answer.where} for answer in answers]
        if self.as_json:
            self.stdout.write(json.dumps(document, indent=2))
            return
        for answer in answers:
            self.stdout.write(answer.message)


class Output:
    """Text to a stream as Django's ``OutputWrapper`` writes it: each write ends with a newline."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str = "", style_func: Callable[[str], str] | None = None, ending: str = "\n") -> None:
        self.stream.write(text if text.endswith(ending) else text + ending)


def run_on_settings_alone(program: str, arguments: Sequence[str]) -> int:
    """Run a read subcommand (``runs_on_settings_alone``) without Django's management machinery
    or its app registry; returns the exit status. The options every Django command takes are
    accepted as ``manage.py`` accepts them (``--settings`` and ``--pythonpath`` were applied by
    the caller, before the settings were read; ``--traceback`` shows an error's traceback), and
    an error is reported as Django reports a CommandError."""
    parser = argparse.ArgumentParser(prog=f"{program} jobs", description=Subcommands.help)
    parser.add_argument("-v", "--verbosity", type=int, choices=[0, 1, 2, 3], default=1, help="verbosity level (no effect here)")
    parser.add_argument("--settings", help="the settings module, as DJANGO_SETTINGS_MODULE")
    parser.add_argument("--pythonpath", help="a directory to add to the Python path")
    parser.add_argument("--traceback", action="store_true", help="show the traceback of an error")
    parser.add_argument("--no-color", action="store_true", help="no colour (none is used here)")
    parser.add_argument("--force-color", action="store_true", help="colour (none is used here)")
    subcommands = Subcommands()
    subcommands.stdout = Output(sys.stdout)
    subcommands.add_arguments(parser)
    options = vars(parser.parse_args(list(arguments)))
    try:
        subcommands.handle(**options)
    except SubcommandError as error:
        if options["traceback"]:
            raise
        sys.stderr.write(f"CommandError: {error}\n")
        return 1
    finally:
        sys.stdout.flush()
    return 0
