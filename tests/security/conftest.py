"""The security tests that launch tracked tasks need tracking's engine middlewares, as a project
following the README has them (``Task.objects.launch`` refuses to run without the client one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _tracking_middleware(_engine_on_test_redis: None, settings) -> Iterator[None]:
    from jobsapp import middleware

    settings.JOBSAPP = {
        **settings.JOBSAPP,
        "CLIENT_MIDDLEWARE": ["tracking.middleware.TrackingClientMiddleware"],
        "SERVER_MIDDLEWARE": ["tracking.middleware.TrackingServerMiddleware"],
    }
    middleware.reset_chains()
    yield
    middleware.reset_chains()
    from tracking.writer import stop_writer

    stop_writer()
