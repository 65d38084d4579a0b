"""The ported suite's source: Celery's pinned sdist, and the port of its integration files."""

from __future__ import annotations

from tests.conformance import upstream

from .port import FILES, PORTED


def test_the_integration_suite_is_ported_from_the_pinned_sdist():
    # Given the pinned Celery sdist (a skip with pip's reason when the index cannot be reached; a failure in CI)
    root = upstream.require(upstream.CELERY)
    # Then every upstream file the suite runs exists in it, and its ported copy is there to collect
    for path in FILES:
        assert (root / path).is_file(), path
        assert (PORTED / path).is_file(), path
    # And only imports changed: the ported files hold no "from celery" import any more
    for path in FILES:
        text = (PORTED / path).read_text(encoding="utf-8")
        assert "\nfrom celery" not in text and "\nimport celery\n" not in text, path
