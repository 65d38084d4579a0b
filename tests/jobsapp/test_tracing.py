"""Tracing middlewares against an in-memory exporter: the context injected into the job hash as
Ruby's opentelemetry-instrumentation-sidekiq writes it, and a payload Ruby wrote picked up."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("opentelemetry.sdk", reason="tracing tests need opentelemetry-sdk (requirements-dev.txt)")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobsapp import middleware
from jobsapp.tracing import TracingClientMiddleware, TracingServerMiddleware
from tests.testapp.jobs import Explode, HardWorker

#: A job hash as Ruby's Sidekiq 6.4 with opentelemetry-instrumentation-sidekiq pushes it: the
#: client middleware's OpenTelemetry.propagation.inject(job) adds "traceparent" at the top level.
RUBY_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
RUBY_SPAN_ID = "00f067aa0ba902b7"
RUBY_PAYLOAD = {
    "retry": True,
    "queue": "default",
    "class": "HardWorker",
    "args": ["bob", 5],
    "jid": "b4a577edbccf1d805744efa9",
    "created_at": 1763827500.1234,
    "enqueued_at": 1763827500.2345,
    "traceparent": f"00-{RUBY_TRACE_ID}-{RUBY_SPAN_ID}-01",
}


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def run(item: dict, *, provider, **options):
    """Run ``item`` through a server chain holding only the tracing middleware."""
    from jobsapp import registry

    chain = middleware.server_chain()
    chain.clear()
    chain.add(TracingServerMiddleware, tracer_provider=provider, **options)
    job = registry.lookup(item["class"])()
    job.jid, job.item, job.queue = item["jid"], item, item["queue"]
    return middleware.run_server_chain(job, item, item["queue"], lambda: job.perform(*item["args"]))


def test_a_push_injects_the_current_trace_into_the_job_hash(redis, spans):
    # Given the tracing client middleware and a request span in progress
    provider, exporter = spans
    chain = middleware.client_chain()
    chain.clear()
    chain.add(TracingClientMiddleware, tracer_provider=provider)
    with provider.get_tracer("web").start_as_current_span("GET /orders") as request_span:
        # When a job is pushed
        jid = HardWorker.perform_async("bob", 5)
    # Then the job hash carries a W3C traceparent of a PRODUCER span of the request's trace
    pushed = json.loads(redis.rpop("queue:default"))
    publish = next(span for span in exporter.get_finished_spans() if span.name == "default publish")
    trace_id = format(request_span.get_span_context().trace_id, "032x")
    version, injected_trace, injected_span, flags = pushed["traceparent"].split("-")
    assert (version, injected_trace, injected_span) == ("00", trace_id, format(publish.context.span_id, "016x"))
    assert int(flags, 16) & 1, "sampled"
    assert publish.kind == trace.SpanKind.PRODUCER and publish.parent.span_id == request_span.get_span_context().span_id
    assert publish.attributes["messaging.message_id"] == jid and publish.attributes["messaging.sidekiq.job_class"] == "HardWorker"
    assert publish.attributes["messaging.system"] == "sidekiq" and publish.attributes["messaging.destination_kind"] == "queue"
    assert [event.name for event in publish.events] == ["created_at"]


def test_a_job_ruby_pushed_is_processed_in_a_span_linked_to_rubys(spans):
    # Given a job hash exactly as Ruby's instrumentation writes it
    provider, exporter = spans
    # When a worker runs it (default propagation style: link)
    run(dict(RUBY_PAYLOAD), provider=provider)
    # Then a CONSUMER root span named as Ruby's links to the Ruby producer span
    (span,) = exporter.get_finished_spans()
    assert span.name == "default process" and span.kind == trace.SpanKind.CONSUMER and span.parent is None
    (link,) = span.links
    assert (format(link.context.trace_id, "032x"), format(link.context.span_id, "016x")) == (RUBY_TRACE_ID, RUBY_SPAN_ID)
    assert span.attributes["messaging.operation"] == "process" and span.attributes["messaging.message_id"] == RUBY_PAYLOAD["jid"]
    assert [event.name for event in span.events] == ["created_at", "enqueued_at"]
    assert span.events[1].timestamp == int(RUBY_PAYLOAD["enqueued_at"] * 1_000_000_000)


def test_child_style_continues_rubys_trace_and_a_failure_marks_the_span(spans):
    # Given a Ruby-written job of a class that raises, and the "child" propagation style
    provider, exporter = spans
    failing = {**RUBY_PAYLOAD, "class": Explode.wire_name(), "args": ["kaput"]}
    # When it runs, Then the exception reaches the engine unchanged
    with pytest.raises(ValueError, match="kaput"):
        run(failing, provider=provider, propagation_style="child", span_naming="job_class")
    # and its span is a child of Ruby's, named after the class, in error
    (span,) = exporter.get_finished_spans()
    assert span.name == f"{Explode.wire_name()} process"
    assert format(span.context.trace_id, "032x") == RUBY_TRACE_ID and format(span.parent.span_id, "016x") == RUBY_SPAN_ID
    assert span.status.status_code == trace.StatusCode.ERROR


def test_bad_options_are_refused():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="propagation_style"):
        TracingServerMiddleware(propagation_style="sideways")
