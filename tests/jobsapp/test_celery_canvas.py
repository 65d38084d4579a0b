"""The Celery canvas's edges on a real worker: what a task's failure or a rolling deploy does to
the tasks around it, and results read in a process that must keep running."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobsapp.celery import AsyncResult, ChordError, GroupResult, Signature, TaskFailure, chain, chord, group
from tests.conformance.celery.ported import a_set, add, error_handler, exits, mul, old_style_errback, raising_task, tsum
from tests.workers import WorkerProcess, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

TIMEOUT = 20


@pytest.fixture(scope="module")
def worker(redis_server, tmp_path_factory) -> Iterator[Path]:
    """A runworkers with the tasks of tests/conformance/celery; yields the file its errbacks write."""
    errors = tmp_path_factory.mktemp("errbacks") / "errors.txt"
    errors.touch()
    env = {"DJANGO_SETTINGS_MODULE": "tests.conformance.celery.settings", "CELERY_CONFORMANCE_ERRORS": str(errors)}
    process = WorkerProcess(["-c", "2"], env=env, redis_url=redis_server.url).start()
    yield errors
    process.stop()


def test_a_task_that_exits_does_not_exit_the_caller():
    # Given a task that raises SystemExit in the worker
    result = exits.delay()
    # When the caller reads its result, Then it gets a regular exception describing it
    with pytest.raises(TaskFailure, match="SystemExit"):
        result.get(timeout=TIMEOUT)
    assert result.state == "FAILURE"
    assert isinstance(result.result, TaskFailure)


def test_a_next_step_unknown_to_the_worker_leaves_the_previous_step_successful(redis):
    # Given a chain whose second step names a task no worker defines yet (a rolling deploy)
    missing: Signature = Signature("tests.not_deployed_yet.task", (10,))
    result = chain(add.s(1, 1), missing).apply_async()
    # When the worker runs the first step
    assert result.parent.get(timeout=TIMEOUT) == 2
    # Then the first step stays SUCCESS and the next one is pushed anyway, by name, with the value
    assert result.parent.state == "SUCCESS"
    wait_until(lambda: redis.zcard("retry") + redis.zcard("dead") >= 1, timeout_seconds=TIMEOUT, message="the step was filed")
    filed = [*redis.zrange("retry", 0, -1), *redis.zrange("dead", 0, -1)]
    assert any(result.id.encode() in raw and b"tests.not_deployed_yet.task" in raw and b"[2,10]" in raw for raw in filed)


def test_an_errback_of_one_argument_is_pushed_with_the_failed_task_id(worker):
    # Given a task with an old-style errback (one argument: Celery pushes it as a task)
    errback = old_style_errback.s()
    errback_result = errback.freeze()
    result = raising_task.apply_async(link_error=errback)
    # When the task fails
    with pytest.raises(ValueError):
        result.get(timeout=TIMEOUT)
    # Then the errback ran as a task (its own id, its own result), given the failed task's id
    assert errback_result.get(timeout=TIMEOUT) == result.id
    assert f"old-style {result.id}" in worker.read_text()


def test_each_callback_of_a_link_list_gets_the_parent_value():
    # Given two callbacks linked to one task (Celery's calling guide: link=[add.s(16), other_task.s()])
    result = add.apply_async((2, 2), link=[add.s(16), mul.s(10)])
    # Then each is applied with the parent's value, not chained to the other
    assert result.get(timeout=TIMEOUT) == 4
    assert [child.get(timeout=TIMEOUT) for child in result.children] == [20, 40]


def test_an_errback_taking_the_request_is_called_in_the_worker(worker):
    # Given a task with an errback of three arguments (request, exc, traceback)
    result = add.apply_async((2, "two"), link_error=error_handler.s())
    # When it fails, Then the errback was called with the failed request, the exception and the traceback
    with pytest.raises(TypeError):
        result.get(timeout=TIMEOUT)
    wait_until(lambda: f"Task {result.id} raised exception: TypeError(" in worker.read_text(), timeout_seconds=TIMEOUT)
    assert "Traceback (most recent call last)" in worker.read_text()


def test_a_chain_applied_with_a_task_id_gives_it_to_its_last_task():
    # Given a chain applied with task_id (Celery 5.4: a chain has the id of its last task)
    result = (add.s(1, 1) | add.s(2)).apply_async(task_id="the-chains-own-id")
    # Then its result is the last task's, under that id, and the first task has another one
    assert result.id == "the-chains-own-id" and result.get(timeout=TIMEOUT) == 4
    assert result.parent.id != "the-chains-own-id" and result.parent.get(timeout=TIMEOUT) == 2


def test_a_group_result_is_a_set_of_results():
    # Given a GroupResult of two results
    first, second, third = AsyncResult("a" * 24), AsyncResult("b" * 24), AsyncResult("c" * 24)
    results = GroupResult("g" * 24, [first, second])
    # When results are added and discarded, Then each is there once, in order
    results.add(first)
    results.update([second, third])
    results.discard(second)
    assert results.results == [first, third] and len(results) == 2
    assert results.waiting() and not results.ready() and results.completed_count() == 0
    results.clear()
    assert results.results == []


def test_a_chain_applied_with_link_calls_it_with_the_last_value():
    # Given a chain applied with a callback (Celery links it to the chain's last task)
    result = (add.s(1, 1) | add.s(2)).apply_async(link=mul.s(10))
    # Then the callback gets the chain's value
    assert result.get(timeout=TIMEOUT) == 4
    assert result.children[0].get(timeout=TIMEOUT) == 40


def test_results_a_canvas_does_not_store_are_none_at_once():
    # Given a group and a chain whose tasks ignore their results
    grouped = group(add.s(1, 1).set(ignore_result=True), add.s(2, 2)).apply_async()
    chained = (add.s(1, 1) | add.s(1).set(ignore_result=True)).apply_async()
    # Then get() returns None for them at once (Celery's ignored result), never waits for ever
    assert grouped.get(timeout=TIMEOUT) == [None, 4]
    assert chained.get(timeout=1) is None
    assert chained.parent.get(timeout=TIMEOUT) == 2


def test_a_chord_header_may_hold_chains():
    # Given a chord whose header parts are a chain and a task
    result = chord([chain(add.s(1, 1), mul.s(10)), add.s(5, 5)], tsum.s()).apply_async()
    # Then the callback gets each part's value: a chain's is its last task's
    assert result.get(timeout=TIMEOUT) == 30
    assert result.parent.get(timeout=TIMEOUT) == [20, 10]
    # And a chain in the header that fails fails the chord: a ChordError that is also the header's own error
    failing = chord([chain(add.s(1, 1), raising_task.si()), add.s(5, 5)], tsum.s()).apply_async()
    with pytest.raises(ChordError, match="something something") as raised:
        failing.get(timeout=TIMEOUT)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value.__cause__, ValueError)
    # And a group inside a header gives each of its tasks' values as parts of their own
    unrolled = chord([group(add.s(1, 1), add.s(2, 2)), add.s(5, 5)], tsum.s()).apply_async()
    assert unrolled.get(timeout=TIMEOUT) == 16
    assert unrolled.parent.get(timeout=TIMEOUT) == [2, 4, 10]
    # And a chord inside a header gives its callback's value
    nested = chord([chord([add.s(1, 1), add.s(2, 2)], tsum.s()), add.s(5, 5)], tsum.s()).apply_async()
    assert nested.get(timeout=TIMEOUT) == 16
    # And chunks in a header are refused when applied
    with pytest.raises(NotImplementedError, match="header"):
        chord([add.chunks([(1, 1), (2, 2)], 1), add.s(5, 5)], tsum.s()).apply_async()


def test_a_group_may_hold_chains_chords_and_groups():
    # Given a group of a chain, a chord, a group and a task
    result = group(
        chain(add.s(1, 1), mul.s(3)),
        chord([add.s(1, 1), add.s(2, 2)], tsum.s()),
        group(add.s(3, 3), add.s(4, 4)),
        add.s(2, 2),
    )()
    # Then its value is each member's value, in order (a group inside is flattened into it, as Celery does)
    assert result.get(timeout=TIMEOUT) == [6, 6, 6, 8, 4]


def test_a_header_value_json_cannot_hold_fails_the_callback_visibly():
    # Given a chord one of whose header tasks returns a set
    result = chord([add.s(1, 1), a_set.s()], tsum.s()).apply_async()
    # Then the callback is FAILURE with the reason, never PENDING for ever
    with pytest.raises(TypeError, match="set"):
        result.get(timeout=TIMEOUT)


def test_results_give_celery_s_tuple_form():
    # Given a frozen chain and a frozen group
    chained = (add.s(1, 1) | add.s(2)).freeze()
    grouped = group(add.s(1, 1), add.s(2, 2)).freeze()
    # Then as_tuple() nests each result with its parent's, and a group's with its members', as Celery's
    assert chained.as_tuple() == ((chained.id, ((chained.parent.id, None), None)), None)
    assert grouped.as_tuple() == ((grouped.id, None), [((each.id, None), None) for each in grouped.results])


def test_a_one_task_group_is_still_a_group_unless_it_holds_a_group():
    # Given a group of one task, and a group of one chain ending in a group
    single = group(add.s(1, 1))()
    nested = group(add.s(1, 2) | group(add.s(1), add.s(2)))()
    # Then the first gives a list of one value; the second the inner group's values (Celery's special case)
    assert isinstance(single, GroupResult) and single.get(timeout=TIMEOUT) == [2]
    assert nested.get(timeout=TIMEOUT) == [4, 5]


def test_a_generator_header_is_read_when_the_chord_is_applied():
    # Given a chord whose header is a generator
    read: list[int] = []

    def header() -> Iterator[Signature[int]]:
        for number in range(3):
            read.append(number)
            yield add.s(number, number)

    workflow = chord(header(), tsum.s())
    # Then nothing of it is read when the chord is declared
    assert read == []
    # And applying it pushes each task as it comes, and the callback gets their values in order
    result = workflow.apply_async()
    assert read == [0, 1, 2]
    assert result.get(timeout=TIMEOUT) == 6
    assert result.parent.get(timeout=TIMEOUT) == [0, 2, 4]
    # And an empty generator gives the callback an empty list
    assert chord((add.s(n, n) for n in range(0)), tsum.s()).apply_async().get(timeout=TIMEOUT) == 0


def test_a_frozen_chord_applied_twice_runs_its_callback_twice():
    # Given a frozen chord (its ids fixed)
    workflow = chord([add.s(1, 1), add.s(2, 2)], tsum.s())
    workflow.freeze()
    # Then each application is a run of its own: the callback runs again with the same ids
    first = workflow.apply_async()
    assert first.get(timeout=TIMEOUT) == 6
    first.forget()
    second = workflow.apply_async()
    assert second.id == first.id and second.get(timeout=TIMEOUT) == 6


def test_a_saved_group_result_is_restored_by_its_id():
    # Given a group's result, saved
    saved = group(add.s(1, 1), add.s(2, 2)).apply_async()
    saved.save()
    # Then restore() gives it back by its id, with its tasks' results
    restored = GroupResult.restore(saved.id)
    assert restored is not None and [each.id for each in restored.results] == [each.id for each in saved.results]
    assert restored.get(timeout=TIMEOUT) == [2, 4]
    # And once deleted it is gone
    saved.delete()
    assert GroupResult.restore(saved.id) is None
