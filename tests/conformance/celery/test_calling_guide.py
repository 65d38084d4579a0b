"""Celery's calling guide (docs/userguide/calling.rst, UPSTREAM.md), example by example, imports
changed only, run by a real runworkers: each case asserts what the guide states."""

from __future__ import annotations

import time
import warnings
from datetime import UTC, datetime, timedelta

import pytest

from jobsapp.celery import group
from jobsapp.celery import options as options_module
from tests.conformance.celery.conftest import TIMEOUT
from tests.conformance.celery.ported import add, error_handler, mul

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("worker")]


# --- Basics and the cheat sheet ----------------------------------------------------------------


def test_delay_and_apply_async_are_the_same_call():
    assert add.delay(2, 2).get(timeout=TIMEOUT) == 4
    assert add.apply_async((2, 2)).get(timeout=TIMEOUT) == 4
    assert add.apply_async(args=[2, 2], kwargs={}).get(timeout=TIMEOUT) == 4
    assert add.s(2, 2).apply_async().get(timeout=TIMEOUT) == 4


def test_a_task_id_of_ones_own():
    result = add.apply_async((1, 1), task_id="my_own_task_id")
    assert result.id == "my_own_task_id"
    assert result.get(timeout=TIMEOUT) == 2


# --- Linking (callbacks/errbacks) --------------------------------------------------------------


def test_a_callback_gets_the_result_of_the_parent():
    result = add.apply_async((2, 2), link=add.s(16))
    assert result.get(timeout=TIMEOUT) == 4
    assert result.children[0].get(timeout=TIMEOUT) == 20  # (2 + 2) + 16


def test_an_error_callback_is_called_with_the_request_the_exception_and_the_traceback(errors_written):
    result = add.apply_async((2, 2), link_error=error_handler.s())
    assert result.get(timeout=TIMEOUT) == 4  # succeeded: the errback is not called
    failing = add.apply_async((2, None), link_error=error_handler.s())
    with pytest.raises(TypeError):
        failing.get(timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while f"Task {failing.id} raised exception: TypeError(" not in errors_written() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"Task {failing.id} raised exception: TypeError(" in errors_written()
    assert result.id not in errors_written()


def test_every_callback_of_a_list_gets_the_parent_value():
    result = add.apply_async((2, 2), link=[add.s(16), mul.s(10)])
    assert [child.get(timeout=TIMEOUT) for child in result.children] == [20, 40]


# --- ETA and Countdown, Expiration -------------------------------------------------------------


def test_countdown_runs_no_sooner():
    started = time.monotonic()
    result = add.apply_async((2, 2), countdown=3)
    assert result.get(timeout=TIMEOUT) == 4  # this takes at least 3 seconds to return
    assert time.monotonic() - started >= 2.9


def test_an_eta_in_the_future_waits():
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    result = add.apply_async((2, 2), eta=tomorrow)
    time.sleep(1)
    assert result.state == "PENDING"
    result.revoke()


def test_expires():
    assert add.apply_async((10, 10), expires=60).get(timeout=TIMEOUT) == 20
    kwargs = {}
    result = add.apply_async((10, 10), kwargs, expires=datetime.now(UTC) + timedelta(days=10))
    assert result.get(timeout=TIMEOUT) == 20


# --- Connections, Routing, Results options -------------------------------------------------------


def test_a_group_instead_of_a_connection_by_hand():
    numbers = [(2, 2), (4, 4), (8, 8), (16, 16)]
    res = group(add.s(i, j) for i, j in numbers).apply_async()
    assert res.get(timeout=TIMEOUT) == [4, 8, 16, 32]


def test_the_connection_pool_is_refused_with_a_clear_error():
    with pytest.raises(AttributeError):
        add.app.pool


def test_a_queue_of_ones_own():
    assert add.apply_async((2, 2), queue="priority.high").get(timeout=TIMEOUT) == 4  # worker: -q priority.high


# --- Message Sending Retry, Serializers, Compression: accepted, warned once, ignored ---------------


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"retry": False}, "retry"),
        (
            {
                "retry": True,
                "retry_policy": {
                    "max_retries": 3,
                    "interval_start": 0,
                    "interval_step": 0.2,
                    "interval_max": 0.2,
                    "retry_errors": None,
                },
            },
            "retry_policy",
        ),
        ({"serializer": "json"}, "serializer"),
        ({"compression": "zlib"}, "compression"),
    ],
)
def test_transport_options_are_accepted_with_a_warning(options, option):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options_module._warned.discard(option)
        result = add.apply_async((10, 10), **options)
    assert any(option in str(warning.message) for warning in caught)
    assert result.get(timeout=TIMEOUT) == 20


def test_ignore_result():
    result = add.apply_async((1, 2), ignore_result=True)
    assert result.get() is None
    result = add.apply_async((1, 2), ignore_result=False)
    assert result.get(timeout=TIMEOUT) == 3


def test_on_message_is_refused_with_a_clear_error():
    result = add.apply_async((1, 1))
    with pytest.raises(TypeError, match="on_message"):
        result.get(on_message=print, propagate=False)
