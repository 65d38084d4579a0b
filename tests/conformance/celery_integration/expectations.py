"""The upstream tests the project refuses on purpose, each with the reason docs/celery.md gives.

Each is marked ``xfail(strict=True, raises=...)``: it must fail with exactly that error (a pass,
a hang or another error fails the run), so a refusal cannot quietly turn into something else.
Keys are pytest ids inside the ported package (``test_tasks.py::test_tasks::test_name``; a
parametrized test by its base name covers every parameter).

Every refusal fails loudly at the call: ``NotImplementedError`` naming what is missing (a broker
connection, kombu's pool, Celery's tracer), or, for a test that asserts Celery's result backend
subscribes to a Redis channel, the ``AssertionError`` of that first assertion. Not strict: a test
whose body races its own receiver, and one that outlasts its own timeout on the suite's worker
(either may pass).
"""

from __future__ import annotations

from dataclasses import dataclass

from _pytest.outcomes import Failed


@dataclass(frozen=True)
class Refusal:
    reason: str
    raises: type[BaseException] | tuple[type[BaseException], ...] = NotImplementedError
    #: False only for a test whose outcome depends on timing (it may pass): then it is not counted as refused
    strict: bool = True


BROKER = Refusal("needs Celery's broker connection (kombu's connection pool, AMQP producer and events)")
TRACER = Refusal("reads Celery's internal tracer (celery.app.trace) and its log records in the test process")
RESULT_SUBSCRIPTION = Refusal(
    "asserts that applying a task subscribes this process to the Redis channel celery-task-meta-<id>, which is how "
    "Celery's Redis result backend waits for a result; here a result is read from the result store, without pub/sub "
    "(the suite's get_active_redis_channels lists the real PUBSUB CHANNELS, and the test's first assertion fails)",
    raises=AssertionError,
)
RECEIVER_RACE = Refusal(
    "racy in its body: it sets assertion_result = False after delay() returns and expects the True its task_received "
    "receiver sets when the worker takes the task; the worker thread here takes and starts the task within the "
    "interpreter's thread switch interval, before the test's thread resumes, and the False overwrites the True",
    raises=AssertionError,
    strict=False,
)

OUTLASTS_ITS_TIMEOUT = Refusal(
    "its two rounds of eleven canvases leave sixteen 2 s tasks and the chains they continue running, which the "
    "next round's wait_until_idle waits for: on the suite's 4-thread worker that outlasts its own 20 s timeout "
    "(pytest-timeout's Failed). Every one of its subtests passes, and the test does with 10 threads, but 4 is the "
    "most the suite's worker may have: test_revoked and test_expired fill it with four 2 s tasks to keep the next waiting",
    raises=Failed,
    strict=False,
)

REFUSED: dict[str, Refusal] = {
    "test_tasks.py::test_tasks::test_task_sent_event_respects_publish_retry_limit": BROKER,
    "test_tasks.py::test_trace_log_arguments::test_task_success": TRACER,
    "test_tasks.py::test_trace_log_arguments::test_task_failed": TRACER,
    "test_tasks.py::test_task_redis_result_backend::test_asyncresult_forget_cancels_subscription": RESULT_SUBSCRIPTION,
    "test_tasks.py::test_task_redis_result_backend::test_asyncresult_get_cancels_subscription": RESULT_SUBSCRIPTION,
    "test_tasks.py::test_task_replacement::test_replaced_task_nesting_level_0": RECEIVER_RACE,
    "test_tasks.py::test_tasks::test_revoked_by_headers_complex_canvas": OUTLASTS_ITS_TIMEOUT,
}


def refusal_for(test_id: str) -> Refusal | None:
    """The refusal of a test id (a parametrized one by its base name too)."""
    return REFUSED.get(test_id) or REFUSED.get(test_id.split("[", 1)[0])


#: Refused tests that are not run, for a refusal an expected failure cannot cover: one reported
#: only by a subtest, which would let the test around it pass, or one that polls for what only
#: Celery's own backend writes, so that it can only end by its own timeout.
NOT_RUN: dict[str, Refusal] = {
    "test_canvas.py::test_chord::test_chord_on_error": Refusal(
        "reads Celery's Redis result backend itself: the children its worker stores with a result, uuid4 task ids, "
        "the result meta's group_id and the chord's '.j' key (backend.get_key_for_group); it polls res.children "
        "for a minute before it gets there"
    ),
}


def collected(test_id: str) -> bool:
    """Whether a ported test runs in the suite: all of test_tasks.py and test_canvas.py but ``NOT_RUN``."""
    return test_id not in NOT_RUN
