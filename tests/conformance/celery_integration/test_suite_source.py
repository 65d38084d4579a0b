"""The ported suite's source: Celery's pinned sdist, and the port of its integration files."""

from __future__ import annotations

from tests.conformance import upstream

from .conftest import PORTED
from .port import FILES


def test_the_integration_suite_is_ported_from_the_pinned_sdist():
    # Given the pinned Celery sdist (a skip with pip's reason when the index cannot be reached; a failure in CI)
    root = upstream.require(upstream.CELERY)
    # Then every upstream file the suite runs exists in it, and its ported copy is there to collect
    for upstream_path, name in FILES.items():
        assert (root / upstream_path).is_file(), upstream_path
        assert (PORTED / name).is_file(), name
    # And only imports changed: the ported files hold no "from celery" import any more
    for name in FILES.values():
        text = (PORTED / name).read_text(encoding="utf-8")
        assert "\nfrom celery" not in text and "\nimport celery\n" not in text, name
