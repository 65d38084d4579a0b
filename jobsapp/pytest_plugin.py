"""pytest fixtures for projects that use jobsapp: ``jobs_fake`` and ``jobs_inline``.

Installed as a pytest plugin (entry point ``pytest11``: ``jobsapp``), so they are available in
any test once jobsapp is installed; without the package installed, add
``pytest_plugins = ["jobsapp.pytest_plugin"]`` to your ``conftest.py``. Both give the
``jobsapp.testing`` module, in its mode for the length of one test, emptied before and after (the
modes are process-wide, so a test never sees another's jobs)::

    def test_signup_sends_a_welcome(jobs_fake):
        signup("ann@example.com")
        [item] = jobs_fake.jobs(SendWelcome)
        assert item["args"] == ["ann@example.com"]
        jobs_fake.drain_all()             # runs them, and what they enqueue

    def test_receipt_is_rendered(jobs_inline):
        SendReceipt.perform_async(42)     # ran already, in this thread; its exception propagates

Nothing here touches Redis or needs Django settings until a fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest


def _in_mode(mode: str) -> Iterator[ModuleType]:
    from jobsapp import testing

    previous = testing.mode()
    testing.clear_all()
    testing.set_mode(mode)
    try:
        yield testing
    finally:
        testing.set_mode(previous)
        testing.clear_all()


@pytest.fixture
def jobs_fake() -> Iterator[ModuleType]:
    """Pushes are collected in memory (``jobs``, ``drain``, ``drain_all``, ``perform_one``)."""
    yield from _in_mode("fake")


@pytest.fixture
def jobs_inline() -> Iterator[ModuleType]:
    """Pushes run the job at once, through the server middleware; exceptions propagate."""
    yield from _in_mode("inline")
