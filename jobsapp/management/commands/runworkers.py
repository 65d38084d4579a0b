"""``python manage.py runworkers``: parse Sidekiq-like flags, print a banner, run the launcher."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobsapp import connection, logs, registry, shards
from jobsapp.conf import jobs_settings
from jobsapp.errors import UnknownShard
from jobsapp.worker.fetch import QueueOrder
from jobsapp.worker.launcher import MAX_CONCURRENCY, WorkerOptions, default_processes, limits_problem, run


class Command(BaseCommand):
    help = "Run background job workers (Sidekiq-compatible) until TERM/INT."
    # The full system checks import every URLconf, view and serializer (~20 MB per worker
    # process that a worker never uses); the engine's own checks run in handle() instead.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "-q",
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME[,WEIGHT]",
            help="queue to process, repeatable; weights make the order weighted-random, "
            "no weights means strict order (default: JOBSAPP['QUEUES'])",
        )
        parser.add_argument("-c", "--concurrency", type=int, help=f"processor threads per process (default 10, at most {MAX_CONCURRENCY})")
        parser.add_argument(
            "--async-concurrency",
            type=int,
            help="async jobs (async def perform) running at once per process, on its event loop, besides the -c threads "
            "(default JOBSAPP['ASYNC_CONCURRENCY'], 100)",
        )
        parser.add_argument("-P", "--processes", type=int, help="worker processes to fork (default: one per CPU)")
        parser.add_argument("-t", "--timeout", type=float, help="seconds to wait for running jobs at shutdown (default 25)")
        parser.add_argument("-g", "--tag", help="a tag shown with the process in the dashboards")
        parser.add_argument("--label", action="append", default=None, help="a label for the process, repeatable")
        parser.add_argument("--fetch", choices=["reliable", "basic"], help="fetch strategy (default reliable)")
        parser.add_argument(
            "--shard",
            help="the Redis of JOBSAPP['SHARDS'] to serve (default: 'default'); without -q, the queues routed to it",
        )
        parser.add_argument(
            "--log-format",
            choices=list(logs.FORMATS),
            help="text or json, for the handler installed when the project has not configured the jobsapp loggers "
            "(default JOBSAPP['LOG_FORMAT'])",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.check(tags=["jobsapp"])

        def given(name: str, default: Any) -> Any:
            return default if options[name] is None else options[name]

        if options["shard"] is not None:
            try:
                shards.use_for_process(options["shard"])  # inherited by the -P children
            except UnknownShard as exc:
                raise CommandError(str(exc)) from None
        shard_queues = shards.routed_queues(shards.current())

        worker_options = WorkerOptions(
            queues=given("queues", shard_queues or list(jobs_settings.QUEUES)),
            concurrency=given("concurrency", int(jobs_settings.CONCURRENCY)),
            processes=given("processes", int(jobs_settings.PROCESSES or default_processes())),
            timeout_seconds=given("timeout", float(jobs_settings.SHUTDOWN_TIMEOUT_SECONDS)),
            tag=given("tag", str(jobs_settings.TAG)),
            labels=given("label", list(jobs_settings.LABELS)),
            fetch=given("fetch", str(jobs_settings.FETCH)),
            async_concurrency=given("async_concurrency", int(jobs_settings.ASYNC_CONCURRENCY)),
        )
        try:
            order = QueueOrder.parse(worker_options.queues)
        except ValueError as exc:
            raise CommandError(f"bad -q value: {exc}") from None
        problem = limits_problem(worker_options)
        if problem is not None:
            raise CommandError(problem)
        if worker_options.timeout_seconds < 0:
            raise CommandError("-t must not be negative")
        logs.configure(verbosity=options["verbosity"], log_format=options["log_format"] or str(jobs_settings.LOG_FORMAT))
        self.stdout.write(
            "jobsapp workers\n"
            f"  redis:       {connection.describe()}\n"
            f"  queues:      {order.describe()}\n"
            f"  processes:   {worker_options.processes} x {worker_options.concurrency} threads"
            f" + {worker_options.async_concurrency} async jobs\n"
            f"  fetch:       {worker_options.fetch}\n"
            f"  timeout:     {worker_options.timeout_seconds:g} s\n"
            f"  jobs:        {len(registry.names())} registered\n"
        )
        self.stdout.flush()
        raise SystemExit(run(worker_options))
