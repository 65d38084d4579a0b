"""Celery's canvas guide (docs/userguide/canvas.rst, UPSTREAM.md), example by example, imports
changed only, run by a real runworkers: each case asserts the value the guide states."""

from __future__ import annotations

import pytest

from jobsapp.celery import AsyncResult, ChordError, GroupResult, chain, chord, group, signature
from jobsapp.celery.canvas import StampingVisitor
from tests.conformance.celery.conftest import TIMEOUT
from tests.conformance.celery.ported import (
    add,
    fail,
    log_error,
    mul,
    on_chord_error,
    raising_task,
    reset_buffers,
    subtract,
    tsum,
)
from tests.workers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]

ADD = add.name  # "tests.conformance.celery.tasks.add": the guide's "tasks.add" / "proj.tasks.add"
MODULE = ADD.rpartition(".")[0] + "."


# --- Signatures ------------------------------------------------------------------------------


def test_signatures_print_and_expose_their_fields():
    assert repr(signature(ADD, args=(2, 2), countdown=10)) == f"{ADD}(2, 2)"
    assert repr(add.signature((2, 2), countdown=10)) == f"{ADD}(2, 2)"
    assert repr(add.s(2, 2)) == f"{ADD}(2, 2)"
    assert repr(add.s(2, 2, debug=True)) == f"{ADD}(2, 2, debug=True)"
    s = add.signature((2, 2), {"debug": True}, countdown=10)
    assert s.args == (2, 2)
    assert s.kwargs == {"debug": True}
    assert s.options == {"countdown": 10}
    assert repr(add.s(2, 2).set(countdown=1)) == f"{ADD}(2, 2)"


def test_calling_a_signature_runs_it_here():
    assert add(2, 2) == 4
    assert add.s(2, 2)() == 4


def test_signatures_support_the_calling_api():
    assert add.apply_async((2, 2), countdown=1).get(timeout=TIMEOUT) == 4
    assert add.signature((2, 2), countdown=1).apply_async().get(timeout=TIMEOUT) == 4
    assert add.delay(2, 2).get(timeout=TIMEOUT) == 4
    assert add.signature((2, 2)).delay().get(timeout=TIMEOUT) == 4
    assert add.signature((2, 2), countdown=1).delay().get(timeout=TIMEOUT) == 4
    assert add.signature((2, 2)).set(countdown=1).delay().get(timeout=TIMEOUT) == 4


def test_partials_prepend_arguments():
    partial = add.s(2)
    assert partial.delay(4).get(timeout=TIMEOUT) == 6
    assert partial.apply_async((4,)).get(timeout=TIMEOUT) == 6
    partial = subtract.s(10)
    assert partial.delay(30).get(timeout=TIMEOUT) == 20  # subtract(30, 10)


def test_options_merge_with_the_new_ones_first():
    s = add.signature((2, 2), countdown=10)
    result = s.apply_async(countdown=1)  # countdown is now 1
    assert result.get(timeout=TIMEOUT) == 4


def test_clone_prepends_args_and_merges_kwargs():
    s = add.s(2)
    assert repr(s) == f"{ADD}(2)"
    assert repr(s.clone(args=(4,), kwargs={"debug": True})) == f"{ADD}(4, 2, debug=True)"


def test_an_immutable_callback_gets_no_argument():
    res = add.apply_async((2, 2), link=reset_buffers.signature(immutable=True))
    assert res.get(timeout=TIMEOUT) == 4
    assert res.children[0].get(timeout=TIMEOUT) == "reset"
    res = add.apply_async((2, 2), link=reset_buffers.si())
    assert res.children[0].get(timeout=TIMEOUT) == "reset"


def test_invert_applies_and_gets():
    assert ~add.s(2, 2) == 4


def test_a_callback_gets_the_parent_value():
    res = add.apply_async((2, 2), link=add.s(8))
    assert res.get(timeout=TIMEOUT) == 4
    assert res.children[0].get(timeout=TIMEOUT) == 12  # 4 + 8


# --- The Primitives ----------------------------------------------------------------------------


def test_simple_chain():
    res = chain(add.s(2, 2), add.s(4), add.s(8))()
    assert res.get(timeout=TIMEOUT) == 16
    assert (add.s(2, 2) | add.s(4) | add.s(8))().get(timeout=TIMEOUT) == 16


def test_a_chain_of_immutable_signatures_and_its_parents():
    res = (add.si(2, 2) | add.si(4, 4) | add.si(8, 8))()
    assert res.get(timeout=TIMEOUT) == 16
    assert res.parent.get(timeout=TIMEOUT) == 8
    assert res.parent.parent.get(timeout=TIMEOUT) == 4


def test_simple_group():
    res = group(add.s(i, i) for i in range(10))()
    assert res.get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]


def test_simple_chord():
    res = chord((add.s(i, i) for i in range(10)), tsum.s())()
    assert res.get(timeout=TIMEOUT) == 90


def test_an_immutable_chord_body_gets_no_values():
    result = chord((add.s(c, c) for c in range(3)), reset_buffers.si()).apply_async()
    assert result.get(timeout=TIMEOUT) == "reset"


def test_partial_chains_combine():
    c1 = add.s(4) | mul.s(8)
    res = c1(16)  # (16 + 4) * 8
    assert res.get(timeout=TIMEOUT) == 160
    c2 = add.s(4, 16) | mul.s(2) | (add.s(4) | mul.s(8))  # ((4 + 16) * 2 + 4) * 8
    res = c2()
    assert res.get(timeout=TIMEOUT) == 352


def test_a_group_chained_to_a_task_is_a_chord():
    c3 = group(add.s(i, i) for i in range(10)) | tsum.s()
    res = c3()
    assert res.get(timeout=TIMEOUT) == 90


def test_a_group_at_the_end_of_a_chain_gets_the_previous_value():
    res = (add.s(4, 4) | group(add.si(i, i) for i in range(10)))()
    assert res.get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    assert res.parent.get(timeout=TIMEOUT) == 8
    forwarded = (add.s(1, 1) | group(add.s(10), mul.s(10)))()
    assert forwarded.get(timeout=TIMEOUT) == [12, 20]


# --- Chains ----------------------------------------------------------------------------------


def test_a_linked_task_and_the_result_graph():
    res = add.apply_async((2, 2), link=mul.s(16))
    assert res.get(timeout=TIMEOUT) == 4
    assert len(res.children) == 1 and isinstance(res.children[0], AsyncResult)
    assert res.children[0].get(timeout=TIMEOUT) == 64
    assert list(res.collect()) == [(res, 4), (res.children[0], 64)]


def test_linked_signatures():
    s = add.s(2, 2)
    s.link(mul.s(4))
    s.link(add.s(1))
    res = s.delay()
    assert [child.get(timeout=TIMEOUT) for child in res.children] == [16, 5]


def test_an_error_callback_gets_the_request_the_exception_and_the_traceback(errors_written):
    res = raising_task.s().on_error(log_error.s()).delay()
    with pytest.raises(ValueError, match="something something"):
        res.get(timeout=TIMEOUT)
    wait_until(lambda: res.id in errors_written(), timeout_seconds=TIMEOUT, message="the errback wrote the task's id")
    text = errors_written()
    assert f"{res.id} something something Traceback" in text
    # the success path calls no errback
    assert add.s(2, 2).on_error(log_error.s()).delay().get(timeout=TIMEOUT) == 4


def test_chain_repr_calls_and_parents():
    res = chain(add.s(4, 4), mul.s(8), mul.s(10))
    assert repr(res) == f"{ADD}(4, 4) | mul(8) | mul(10)"
    res = chain(add.s(4, 4), mul.s(8), mul.s(10))()
    assert res.get(timeout=TIMEOUT) == 640
    assert res.parent.get(timeout=TIMEOUT) == 64
    assert res.parent.parent.get(timeout=TIMEOUT) == 8
    assert repr(res.parent.parent) == f"<AsyncResult: {res.parent.parent.id}>"
    assert (add.s(2, 2) | mul.s(8) | mul.s(10)).apply_async().get(timeout=TIMEOUT) == 320


def test_a_chain_has_the_id_of_its_last_task():
    last = mul.s(10)
    frozen = last.freeze()
    res = (add.s(2, 2) | last)()
    assert res.id == frozen.id and res.get(timeout=TIMEOUT) == 40


def test_the_result_graph_is_refused_with_a_clear_error():
    res = chain(add.s(4, 4), mul.s(8)).freeze()
    with pytest.raises(AttributeError, match="graph"):
        res.graph


# --- Groups ----------------------------------------------------------------------------------


def test_group_repr_and_values():
    assert repr(group(add.s(2, 2), add.s(4, 4))) == f"group([{ADD}(2, 2), add(4, 4)])"
    g = group(add.s(2, 2), add.s(4, 4))
    res = g()
    assert res.get(timeout=TIMEOUT) == [4, 8]
    assert len(group(add.s(i, i) for i in range(100))().get(timeout=TIMEOUT)) == 100


def test_a_group_callback_is_linked_to_its_first_task_only():
    g = group(add.s(2, 2), add.s(4, 4))
    g.link(add.s())
    res = g()
    assert res.get(timeout=TIMEOUT) == [4, 8]


def test_a_group_errback_is_called_for_each_failing_task(errors_written):
    g = group(fail.s(), fail.s())
    g.link_error(log_error.s())
    res = g()
    wait_until(lambda: errors_written().count("--") == 2, timeout_seconds=TIMEOUT, message="two errback calls")
    assert all(each.id in errors_written() for each in res.results)


def test_group_results():
    job = group([add.s(2, 2), add.s(4, 4), add.s(8, 8), add.s(16, 16), add.s(32, 32)])
    result = job.apply_async()
    assert isinstance(result, GroupResult)
    assert result.get(timeout=TIMEOUT) == [4, 8, 16, 32, 64]
    assert result.ready() is True
    assert result.successful() is True
    assert result.failed() is False
    assert result.waiting() is False
    assert result.completed_count() == 5
    assert result.join(timeout=TIMEOUT) == [4, 8, 16, 32, 64]


def test_a_group_that_is_waiting():
    result = group(add.s(1, 1).set(countdown=30), add.s(2, 2)).apply_async()
    assert result.results[1].get(timeout=TIMEOUT) == 4
    assert result.waiting() is True and result.ready() is False and result.completed_count() == 1
    result.revoke()
    assert result.results[0].state == "REVOKED"


# --- Group unrolling ---------------------------------------------------------------------------


def test_a_one_task_group_is_unrolled_in_a_chain():
    assert repr(chain(add.s(2, 2), group(add.s(1)), add.s(1))) == f"{ADD}(2, 2) | add(1) | add(1)"
    assert repr(chain(add.s(2, 2), group(add.s(1), add.s(2)), add.s(1))) == f"{ADD}(2, 2) | %add((add(1), add(2)), 1)"
    assert repr(chain(group(add.s(1, 1)), add.s(2))) == f"{ADD}(1, 1) | add(2)"
    assert chain(add.s(2, 2), group(add.s(1)), add.s(1))().get(timeout=TIMEOUT) == 6
    assert chain(group(add.s(1, 1)), add.s(2))().get(timeout=TIMEOUT) == 4


# --- Chords ----------------------------------------------------------------------------------


def test_a_chord_of_a_hundred():
    assert chord(add.s(i, i) for i in range(100))(tsum.s()).get(timeout=TIMEOUT) == 9900
    callback = tsum.s()
    header = [add.s(i, i) for i in range(100)]
    result = chord(header)(callback)
    assert result.get(timeout=TIMEOUT) == 9900


def test_a_failing_header_task_fails_the_chord_with_chord_error():
    c = chord([add.s(4, 4), raising_task.s(), add.s(8, 8)], tsum.s())
    result = c()
    with pytest.raises(ChordError, match=r"Dependency \w+ raised ValueError\('something something'\)"):
        result.get(timeout=TIMEOUT)


def test_a_chord_without_a_callback_is_refused_when_applied():
    c = chord([add.s(4, 4), raising_task.s(), add.s(8, 8)])
    with pytest.raises(ValueError, match="callback"):
        c()


def test_the_chord_callback_errback_is_called_once(errors_written):
    c = (group(add.s(i, i) for i in range(3)) | tsum.s().on_error(on_chord_error.s())).delay()
    assert c.get(timeout=TIMEOUT) == 6
    failing = (group(add.s(1, 1), raising_task.s()) | tsum.s().on_error(on_chord_error.s())).delay()
    with pytest.raises(ChordError):
        failing.get(timeout=TIMEOUT)
    wait_until(lambda: failing.id in errors_written(), timeout_seconds=TIMEOUT, message="the chord errback ran")
    assert errors_written().count("raised error") == 1
    assert f"Task '{failing.id}' raised error: ChordError(" in errors_written()


# --- Map & Starmap, Chunks ---------------------------------------------------------------------


def test_map_and_starmap():
    assert ~tsum.map([list(range(10)), list(range(100))]) == [45, 4950]
    assert ~add.starmap(zip(range(10), range(10))) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    assert repr(tsum.map([1, 2])) == f"[{tsum.name}(x) for x in [1, 2]]"
    later = add.starmap(zip(range(10), range(10))).apply_async(countdown=1)  # the guide waits 10 s
    assert later.get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]


def test_chunks():
    res = add.chunks(zip(range(100), range(100)), 10)()
    assert res.get(timeout=TIMEOUT) == [[2 * (10 * row + column) for column in range(10)] for row in range(10)]
    assert len(add.chunks(zip(range(100), range(100)), 10).apply_async().get(timeout=TIMEOUT)) == 10
    g = add.chunks(zip(range(100), range(100)), 10).group()
    assert g.skew(start=1, stop=10)().get(timeout=TIMEOUT)[9][-1] == 198


# --- Stamping ----------------------------------------------------------------------------------


def test_stamping_marks_each_task_of_a_group():
    sig1 = add.si(2, 2)
    sig1_res = sig1.freeze()
    g = group(sig1, add.si(3, 3))
    g.stamp(stamp="your_custom_stamp")
    res = g.apply_async()
    assert res.get(timeout=TIMEOUT) == [4, 6]
    # the guide reads the stamp back from Celery's result meta (result_extended); here each task carries it
    assert [task.options["stamp"] for task in g.tasks] == ["your_custom_stamp"] * 2
    assert [task.options["stamped_headers"] for task in g.tasks] == [["stamp"]] * 2
    assert isinstance(sig1_res, AsyncResult)


def test_the_guides_callback_stamping_example():
    class CustomStampingVisitor(StampingVisitor):
        def on_signature(self, sig, **headers) -> dict:
            return {"header": "value"}

        def on_callback(self, callback, **header) -> dict:
            return {"on_callback": True}

        def on_errback(self, errback, **header) -> dict:
            return {"on_errback": True}

    c = chord([add.s(1, 1), add.s(2, 2)], tsum.s())
    c.link(signature("sig_link"))
    c.link_error(signature("sig_link_error"))
    c.stamp(visitor=CustomStampingVisitor())
    for task in [*c.tasks, c.body]:
        assert {key: value for key, value in task.options.items() if key not in ("link", "link_error")} == {
            "header": "value",
            "stamped_headers": ["header"],
        }
    (link,) = c.body.options["link"]
    assert {key: link["options"][key] for key in ("header", "on_callback")} == {"header": "value", "on_callback": True}
    assert sorted(link["options"]["stamped_headers"]) == ["header", "on_callback"]
    (errback,) = c.body.options["link_error"]
    assert {key: errback["options"][key] for key in ("header", "on_errback")} == {"header": "value", "on_errback": True}
    assert sorted(errback["options"]["stamped_headers"]) == ["header", "on_errback"]
