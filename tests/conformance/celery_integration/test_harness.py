"""The harness's own rules for the ported suite."""

from __future__ import annotations

import pytest

from . import harness


def test_a_flaky_test_is_run_again_as_celery_declares_and_each_rerun_is_reported(monkeypatch):
    # Given a test Celery marks flaky that fails twice, then passes
    monkeypatch.setattr(harness, "RERUN_DELAY_SECONDS", 0.0)
    outcomes = [AssertionError("late"), AssertionError("late again"), None]
    calls = []

    @harness.flaky
    def test_body(value):
        calls.append(value)
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return value

    # When it runs, Then it passes on its third run, and each rerun is a warning
    with pytest.warns(UserWarning, match="rerun") as warned:
        assert test_body(7) == 7
    assert calls == [7, 7, 7] and len(warned) == 2


def test_a_flaky_test_that_always_fails_fails_after_the_declared_reruns(monkeypatch):
    monkeypatch.setattr(harness, "RERUN_DELAY_SECONDS", 0.0)
    calls = []

    @harness.flaky
    def test_body():
        calls.append(1)
        raise AssertionError("broken")

    with pytest.warns(UserWarning), pytest.raises(AssertionError, match="broken"):
        test_body()
    assert len(calls) == harness.RERUNS + 1


def test_a_refusal_is_never_rerun(monkeypatch):
    monkeypatch.setattr(harness, "RERUN_DELAY_SECONDS", 0.0)
    calls = []

    @harness.flaky
    def test_body():
        calls.append(1)
        raise NotImplementedError("not provided")

    with pytest.raises(NotImplementedError):
        test_body()
    assert calls == [1]


def test_a_test_refused_in_expectations_fails_once_without_reruns(monkeypatch):
    # Given a body with the module and name of a refused upstream test Celery marks flaky
    monkeypatch.setattr(harness, "RERUN_DELAY_SECONDS", 0.0)
    calls = []

    def test_asyncresult_get_cancels_subscription():
        calls.append(1)
        raise AssertionError("no subscription")

    test_asyncresult_get_cancels_subscription.__module__ = "t.integration.test_tasks"
    test_asyncresult_get_cancels_subscription.__qualname__ = "test_task_redis_result_backend.test_asyncresult_get_cancels_subscription"
    # When it runs under Celery's flaky decorator, Then it fails once, as its refusal says
    with pytest.raises(AssertionError, match="no subscription"):
        harness.flaky(test_asyncresult_get_cancels_subscription)()
    assert calls == [1]
