"""The upstream tests the project refuses on purpose, each with the reason docs/celery.md gives.

Each is marked ``xfail(strict=True, raises=...)``: it must fail with exactly that error (a pass,
a hang or another error fails the run), so a refusal cannot quietly turn into something else.
Keys are pytest ids inside the ported package (``test_tasks.py::test_tasks::test_name``; a
parametrized test by its base name covers every parameter).

Every refusal fails loudly at the call: ``NotImplementedError`` naming what is missing (a broker
connection, kombu's pool, Celery's tracer, the result backend's pub/sub channels), or
saying that what the test reads lives in the worker process (``celery.worker.state``, a
``task_received`` receiver): Celery's test worker is a thread of the test process, ``runworkers``
another process, as every production Celery worker is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    reason: str
    raises: type[BaseException] | tuple[type[BaseException], ...] = NotImplementedError
    #: False only for a test whose outcome depends on timing (it may pass): then it is not counted as refused
    strict: bool = True


WORKER_MEMORY = Refusal("reads celery.worker.state, the worker process's own memory (runworkers is another process)")
WORKER_MEMORY_AFTER_SUBTESTS = Refusal(
    f"{WORKER_MEMORY.reason}, after subtests that pass: pytest reports each subtest on its own, so it is not strict",
    strict=False,
)
BROKER = Refusal("needs Celery's broker connection (kombu's connection pool, AMQP producer and events)")
TRACER = Refusal("reads Celery's internal tracer (celery.app.trace) and its log records in the test process")
WORKER_SIGNAL_IN_TEST_PROCESS = Refusal(
    "connects task_received in the test process: it is sent in the worker process, which is the test process only for "
    "Celery's test worker (a thread); runworkers is a separate process, as Celery's production workers are "
    "(signals.worker_elsewhere refuses the receiver)"
)
RESULT_PUBSUB = Refusal(
    "inspects the Redis pub/sub channels of Celery's Redis result backend (celery-task-meta-<id>); results here are "
    "read from the result store, without pub/sub, so the suite's get_active_redis_channels refuses to list them"
)

REFUSED: dict[str, Refusal] = {
    **{
        f"test_canvas.py::test_stamping_mechanism::{name}": WORKER_SIGNAL_IN_TEST_PROCESS
        for name in (
            "test_stamping_workflow",
            "test_task_received_has_access_to_stamps",
            "test_all_tasks_of_canvas_are_stamped",
            "test_replace_merge_stamps",
            "test_linking_stamped_sig",
            "test_err_linking_stamped_sig",
            "test_stamps_remain_on_task_retry",
        )
    },
    "test_tasks.py::test_tasks::test_revoked_by_headers_simple_canvas": WORKER_MEMORY,
    "test_tasks.py::test_tasks::test_revoked_by_headers_complex_canvas": WORKER_MEMORY_AFTER_SUBTESTS,
    "test_tasks.py::test_tasks::test_task_sent_event_respects_publish_retry_limit": BROKER,
    "test_tasks.py::test_tasks::test_send_task_without_ignore_result_uses_task_ignore_result": WORKER_MEMORY,
    "test_tasks.py::test_tasks::test_send_task_without_ignore_result_stores_result": WORKER_MEMORY,
    "test_tasks.py::test_task_redis_result_backend::test_retry_preserves_ignore_result_false": WORKER_MEMORY,
    "test_tasks.py::test_task_redis_result_backend::test_retry_preserves_ignore_result_true": WORKER_MEMORY,
    "test_tasks.py::test_trace_log_arguments::test_task_success": TRACER,
    "test_tasks.py::test_trace_log_arguments::test_task_failed": TRACER,
    "test_tasks.py::test_task_redis_result_backend::test_ignoring_result_no_subscriptions": RESULT_PUBSUB,
    "test_tasks.py::test_task_redis_result_backend::test_asyncresult_forget_cancels_subscription": RESULT_PUBSUB,
    "test_tasks.py::test_task_redis_result_backend::test_asyncresult_get_cancels_subscription": RESULT_PUBSUB,
    "test_tasks.py::test_task_replacement::test_replaced_task_nesting_level_0": WORKER_SIGNAL_IN_TEST_PROCESS,
    "test_tasks.py::test_task_replacement::test_replaced_task_nesting_level_1": WORKER_SIGNAL_IN_TEST_PROCESS,
    "test_tasks.py::test_task_replacement::test_replaced_task_nesting_chain": WORKER_SIGNAL_IN_TEST_PROCESS,
    "test_tasks.py::test_signal_bound_method_receivers::test_each_instance_receives": WORKER_SIGNAL_IN_TEST_PROCESS,
    "test_tasks.py::test_signal_bound_method_receivers::test_disconnect_leaves_other_instance_connected": WORKER_SIGNAL_IN_TEST_PROCESS,
    "test_tasks.py::test_signal_bound_method_receivers::test_other_instance_receives_after_garbage_collection": (
        WORKER_SIGNAL_IN_TEST_PROCESS
    ),
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
