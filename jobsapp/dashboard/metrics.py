"""``/jobs/metrics``: Prometheus text, collected from Redis at scrape time.

A custom collector (no background thread, no state in this process) reads everything through
``jobsapp.api`` in a fixed number of pipelined round trips, whatever the number of queues:
``Stats.fetch`` (2), ``WorkSet.all`` (2), ``ProcessSet.all`` (2), ``job_durations`` (2),
``PeriodicSet.all`` (2), ``CompletedSet.size`` (1), and the outbox's three figures from the
database (``Outbox.state``: three small queries, only with ``OUTBOX`` on). With 100
queues that is about 200 cheap commands per scrape, fine every 5 s.

The metric set follows asynq's (queue size, latency, paused, jobs per queue and state, processed
and failed totals) with Sidekiq's data: Sidekiq keeps no per-queue processed/failed counters,
so those totals are global, and per-class processed counts come from the duration histograms.
Jobs in schedule/retry/dead are counted per set, not per queue: attributing them to queues would
mean decoding every member on every scrape.

Access: staff users, or a request carrying ``Authorization: Bearer <JOBSAPP["METRICS_TOKEN"]>``
when that setting is set (for a scraper that cannot log in). Without credentials it answers 401
(``WWW-Authenticate: Bearer``), with wrong ones (a bad token, a user who is not staff) 403: never a
redirect to a login page, which a scraper cannot follow. Redis down answers 503.
With ``JOBSAPP["SHARDS"]``, ``?shard=NAME`` scrapes that shard (one scrape target per shard).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .. import api, shards
from ..errors import RedisUnavailable, UnknownShard

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TEXT = "text/plain; charset=utf-8"


class JobsCollector(Collector):
    """Reads the installation's state from Redis each time Prometheus scrapes."""

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        stats = api.Stats.fetch()
        running = api.WorkSet.all()
        processes = api.ProcessSet.all()
        durations = api.job_durations()

        processed = CounterMetricFamily("jobs_processed", "Jobs processed (succeeded or failed), lifetime.")
        processed.add_metric([], stats.processed)
        yield processed
        failed = CounterMetricFamily("jobs_failed", "Jobs that raised, lifetime.")
        failed.add_metric([], stats.failed)
        yield failed
        expired = CounterMetricFamily("jobs_expired", "Jobs dropped unrun past their expires_at, lifetime (also in processed).")
        expired.add_metric([], stats.expired)
        yield expired

        size = GaugeMetricFamily("jobs_queue_size", "Jobs waiting in the queue.", labels=["queue"])
        latency = GaugeMetricFamily("jobs_queue_latency_seconds", "Age of the oldest job waiting in the queue.", labels=["queue"])
        paused = GaugeMetricFamily("jobs_queue_paused", "1 when the queue is paused (fetch skips it).", labels=["queue"])
        by_state = GaugeMetricFamily(
            "jobs_queue_jobs",
            "Jobs of the queue by state (pending: waiting; active: running).",
            labels=["queue", "state"],
        )
        active: dict[str, int] = {}
        for work in running:
            active[work.queue] = active.get(work.queue, 0) + 1
        for queue in stats.queues:
            size.add_metric([queue.name], queue.size)
            latency.add_metric([queue.name], queue.latency_seconds)
            paused.add_metric([queue.name], 1 if queue.paused else 0)
            by_state.add_metric([queue.name, "pending"], queue.size)
            by_state.add_metric([queue.name, "active"], active.pop(queue.name, 0))
        for queue_name, count in sorted(active.items()):  # running jobs of queues no longer listed
            by_state.add_metric([queue_name, "active"], count)
        yield from (size, latency, paused, by_state)

        sets = GaugeMetricFamily("jobs_set_size", "Jobs in the schedule, retry and dead sets.", labels=["set"])
        sets.add_metric(["scheduled"], stats.scheduled_size)
        sets.add_metric(["retry"], stats.retry_size)
        sets.add_metric(["dead"], stats.dead_size)
        yield sets

        yield from periodic_metrics(api.PeriodicSet.all())
        yield from limiter_metrics(api.LimiterSet.all())

        yield GaugeMetricFamily("jobs_processes", "Live worker processes (Ruby Sidekiq ones included).", value=len(processes))
        yield GaugeMetricFamily(
            "jobs_threads",
            "Worker threads of the live processes.",
            value=sum(p.concurrency for p in processes),
        )
        yield GaugeMetricFamily("jobs_busy_threads", "Threads running a job.", value=sum(p.busy for p in processes))
        yield GaugeMetricFamily(
            "jobs_quiet_processes",
            "Live processes that are quiet (fetch nothing).",
            value=sum(p.quiet for p in processes),
        )

        histogram = HistogramMetricFamily("jobs_job_duration_seconds", "Job run time by class, from live processes.", labels=["class"])
        for job_class, value in sorted(durations.items()):
            buckets = [("+Inf" if bound == float("inf") else repr(bound), count) for bound, count in value.buckets.items()]
            if not buckets or buckets[-1][0] != "+Inf":
                buckets.append(("+Inf", value.count))
            histogram.add_metric([job_class], buckets, value.sum_seconds)
        yield histogram

        yield GaugeMetricFamily(
            "jobs_results_retained",
            "Finished jobs pushed with retain whose results are still kept (the Completed page).",
            value=api.CompletedSet().size(),
        )

        yield from outbox_metrics(api.Outbox.state())
        yield GaugeMetricFamily(
            "jobs_scrape_duration_seconds",
            "Time spent reading Redis for this scrape.",
            value=time.perf_counter() - started,
        )


def outbox_metrics(state: api.OutboxState | None) -> Iterator[Metric]:
    """The transactional outbox (read from the database; none when ``OUTBOX`` is off or unmigrated)."""
    if state is None:
        return
    yield GaugeMetricFamily("jobs_outbox_entries", "Committed pushes waiting in the outbox for their push or the relay.", value=state.depth)
    age = state.oldest_age_seconds()
    yield GaugeMetricFamily(
        "jobs_outbox_oldest_age_seconds",
        "Age of the oldest entry waiting in the outbox (0 when empty): past OUTBOX_GRACE_SECONDS plus a few, the relay is behind.",
        value=0.0 if age is None else age,
    )
    yield GaugeMetricFamily(
        "jobs_outbox_parked", "Outbox entries that could not be pushed, kept aside with their reason.", value=state.parked
    )


def periodic_metrics(jobs: list[api.PeriodicJob]) -> Iterator[Metric]:
    """Per periodic job (ours and sidekiq-cron's): enabled, last and next run, pushes, last outcome."""
    enabled = GaugeMetricFamily("jobs_periodic_enabled", "1 when the periodic job is enabled.", labels=["name"])
    last_run = GaugeMetricFamily("jobs_periodic_last_run_timestamp_seconds", "When the periodic job was last pushed.", labels=["name"])
    next_run = GaugeMetricFamily("jobs_periodic_next_run_timestamp_seconds", "When the periodic job's next tick is due.", labels=["name"])
    pushed = CounterMetricFamily("jobs_periodic_enqueued", "Ticks of the periodic job that pushed a job (jobsapp's only).", labels=["name"])
    succeeded = GaugeMetricFamily(
        "jobs_periodic_last_succeeded", "1 when the last job of the tick succeeded, 0 when it failed.", labels=["name"]
    )
    for job in jobs:
        enabled.add_metric([job.name], 1 if job.enabled else 0)
        if job.last_enqueued_at:
            last_run.add_metric([job.name], job.last_enqueued_at)
        if job.next_run_at:
            next_run.add_metric([job.name], job.next_run_at)
        if job.ours:
            pushed.add_metric([job.name], job.enqueued_count)
        if job.last_outcome:
            succeeded.add_metric([job.name], 1 if job.last_outcome == "succeeded" else 0)
    yield from (enabled, last_run, next_run, pushed, succeeded)


def limiter_metrics(limiters: list[api.LimiterState]) -> Iterator[Metric]:
    """Per limiter (jobsapp.limiter and QUEUE_LIMITS): its limit, how much is in use, refusals."""
    limit = GaugeMetricFamily("jobs_limiter_limit", "The limiter's size or count.", labels=["name", "kind"])
    in_use = GaugeMetricFamily("jobs_limiter_in_use", "Slots held, or entries in the current window or interval.", labels=["name", "kind"])
    refused = CounterMetricFamily("jobs_limiter_over_limit", "Entries refused for being over the limit.", labels=["name", "kind"])
    for state in limiters:
        limit.add_metric([state.name, state.kind], state.limit)
        in_use.add_metric([state.name, state.kind], state.in_use)
        refused.add_metric([state.name, state.kind], state.over_limit)
    yield from (limit, in_use, refused)


registry = CollectorRegistry(auto_describe=False)
registry.register(JobsCollector())


def _token_matches(request: HttpRequest) -> bool:
    token = (getattr(settings, "JOBSAPP", None) or {}).get("METRICS_TOKEN")
    header = request.headers.get("Authorization", "")
    if not token or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].encode(), str(token).encode())


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition; staff session or bearer token; 503 when Redis is down."""
    if not _token_matches(request):
        user = request.user
        if user.is_authenticated and user.is_active and user.is_staff:
            pass
        elif "Authorization" in request.headers or user.is_authenticated:
            # Wrong credentials: a scraper must see a refusal, not a login page.
            return HttpResponse("403 Forbidden: metrics are for staff users or the metrics bearer token.\n", status=403, content_type=TEXT)
        else:
            response = HttpResponse("401 Unauthorized: send Authorization: Bearer <METRICS_TOKEN>.\n", status=401, content_type=TEXT)
            response["WWW-Authenticate"] = 'Bearer realm="jobsapp metrics"'
            return response
    try:
        with shards.using(request.GET.get("shard") or shards.DEFAULT):
            body = generate_latest(registry)
    except UnknownShard as error:
        return HttpResponse(f"# {error}\n", status=400, content_type=CONTENT_TYPE)
    except RedisUnavailable as error:  # nothing to report: the scraper marks the target down
        return HttpResponse(f"# Redis unavailable: {error}\n", status=503, content_type=CONTENT_TYPE)
    return HttpResponse(body, content_type=CONTENT_TYPE)
