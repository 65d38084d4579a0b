"""OpenTelemetry tracing across languages: a client and a server middleware, as Ruby's.

    JOBSAPP = {
        "CLIENT_MIDDLEWARE": ["jobsapp.tracing.TracingClientMiddleware"],
        "SERVER_MIDDLEWARE": ["jobsapp.tracing.TracingServerMiddleware"],
    }

They do what ``opentelemetry-instrumentation-sidekiq`` does in Ruby, on the same payload, so one
trace runs from a Rails request through a Python job (and back through a job Python enqueues for
Ruby):

- client (the pushing thread): a PRODUCER span ``"<queue> publish"``; the current context is
  injected with the configured propagator (W3C by default) into the job hash itself, as
  top-level ``traceparent`` (and ``tracestate``) keys, exactly where Ruby writes them;
- server (a processor thread): the context is extracted from those keys and a CONSUMER span
  ``"<queue> process"`` wraps the job. ``propagation_style`` as Ruby's: ``"link"`` (the default: a
  new trace linked to the producer's span), ``"child"`` (the same trace), ``"none"``.
  ``span_naming = "job_class"`` names spans after the class instead of the queue.

Attributes are Ruby's: ``messaging.system`` = sidekiq, ``messaging.sidekiq.job_class``,
``messaging.message_id`` (jid), ``messaging.destination`` (queue), ``messaging.destination_kind``
= queue, plus ``messaging.operation`` = process on the server; ``created_at`` and ``enqueued_at``
are span events. An exception out of ``perform`` marks the span as an error and goes on to the
engine unchanged: tracing never changes what becomes of a job.

Needs ``opentelemetry-api`` (``pip install jobsapp[tracing]``) and, to export anything, an SDK
configured by the application. Jobs pushed or run without these middlewares pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from .middleware import ClientMiddleware, ServerMiddleware
from .payload import Item, timestamp_seconds

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError as exc:  # the optional extra is missing: say how to get it
    raise ImproperlyConfigured("jobsapp.tracing needs opentelemetry-api: pip install 'jobsapp[tracing]'") from exc

if TYPE_CHECKING:
    import redis

    from .job import Job


INSTRUMENTATION_NAME = "jobsapp.tracing"
SPAN_NAMINGS = ("queue", "job_class")
PROPAGATION_STYLES = ("link", "child", "none")


def _attributes(item: Item, queue: str) -> dict[str, Any]:
    return {
        "messaging.system": "sidekiq",
        "messaging.sidekiq.job_class": str(item.get("wrapped") or item.get("class", "")),
        "messaging.message_id": str(item.get("jid", "")),
        "messaging.destination": str(item.get("queue") or queue),
        "messaging.destination_kind": "queue",
    }


def _span_name(item: Item, queue: str, naming: str, operation: str) -> str:
    subject = (item.get("wrapped") or item.get("class", "")) if naming == "job_class" else (item.get("queue") or queue)
    return f"{subject} {operation}"


def _add_time_event(span: trace.Span, name: str, value: object) -> None:
    seconds = timestamp_seconds(value)
    if seconds is not None:
        span.add_event(name, timestamp=int(seconds * 1_000_000_000))


class _Traced:
    """What both middlewares share: options checked once, a tracer from the chosen provider."""

    span_naming = "queue"
    propagation_style = "link"

    def __init__(
        self,
        *,
        span_naming: str | None = None,
        propagation_style: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.span_naming = span_naming or self.span_naming
        self.propagation_style = propagation_style or self.propagation_style
        if self.span_naming not in SPAN_NAMINGS:
            raise ImproperlyConfigured(f"span_naming must be one of {', '.join(SPAN_NAMINGS)}, not {self.span_naming!r}")
        if self.propagation_style not in PROPAGATION_STYLES:
            raise ImproperlyConfigured(f"propagation_style must be one of {', '.join(PROPAGATION_STYLES)}, not {self.propagation_style!r}")
        self.tracer_provider = tracer_provider

    @property
    def tracer(self) -> trace.Tracer:
        # asked each time: an application may install its SDK provider after the chain was built
        return trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=self.tracer_provider)


class TracingClientMiddleware(_Traced, ClientMiddleware):
    """A PRODUCER span per push, and the trace context injected into the job hash."""

    def call(self, job_class: type[Job] | None, item: Item, queue: str, redis: redis.Redis) -> Item | None:
        name = _span_name(item, queue, self.span_naming, "publish")
        with self.tracer.start_as_current_span(name, kind=trace.SpanKind.PRODUCER, attributes=_attributes(item, queue)) as span:
            propagate.inject(item)
            _add_time_event(span, "created_at", item.get("created_at"))
        return item


class TracingServerMiddleware(_Traced, ServerMiddleware):
    """A CONSUMER span around each job, linked to (or a child of) the producer's span."""

    def call(self, job: Job, item: Item, queue: str, call_next: Callable[[], Any]) -> Any:
        name = _span_name(item, queue, self.span_naming, "process")
        attributes = {**_attributes(item, queue), "messaging.operation": "process"}
        extracted = propagate.extract(item)
        with self._span(name, attributes, extracted) as span:
            _add_time_event(span, "created_at", item.get("created_at"))
            _add_time_event(span, "enqueued_at", item.get("enqueued_at"))
            return call_next()

    @contextmanager
    def _span(self, name: str, attributes: dict[str, Any], extracted: otel_context.Context) -> Iterator[trace.Span]:
        kind = trace.SpanKind.CONSUMER
        if self.propagation_style == "child":
            with self.tracer.start_as_current_span(name, context=extracted, kind=kind, attributes=attributes) as span:
                yield span
            return
        links = []
        producer = trace.get_current_span(extracted).get_span_context()
        if self.propagation_style == "link" and producer.is_valid:
            links.append(trace.Link(producer))
        # a root span: an empty context has no parent
        with self.tracer.start_as_current_span(name, context=otel_context.Context(), kind=kind, attributes=attributes, links=links) as span:
            yield span
