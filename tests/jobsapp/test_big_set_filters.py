"""Filtered listings of big sets are bounded (issue 14): ``?q=`` on the dashboard's set pages and
``jobs dead --grep`` examine one window of the set per request and offer to look further,
instead of decoding all 200,000 dead jobs in one request (7-10 s before)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from jobsapp.api.sorted_sets import FILTER_SCAN_BUDGET

pytestmark = pytest.mark.django_db

SIZE = 5 * FILTER_SCAN_BUDGET
NEEDLE_RANK = 4 * FILTER_SCAN_BUDGET + 123  # in display order (dead: newest first)


@pytest.fixture
def big_dead_set(redis):
    pipe = redis.pipeline(transaction=False)
    for start in range(0, SIZE, 5000):
        members = {}
        for index in range(start, min(start + 5000, SIZE)):
            rank = SIZE - 1 - index  # the highest score is rank 0
            text = "needle-in-the-haystack" if rank == NEEDLE_RANK else f"hay {index}"
            member = {"class": "Hay", "args": [text], "jid": f"{index:024x}", "error_class": "E", "error_message": "m"}
            members[json.dumps(member)] = 1_700_000_000 + index
        pipe.zadd("dead", members)
    pipe.execute()
    return f"{SIZE - 1 - NEEDLE_RANK:024x}"


def test_a_filter_on_a_big_set_examines_one_window_and_offers_more(big_dead_set, django_user_model):
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True))
    url = reverse("jobsapp:job_set", args=["dead"])
    # When staff filter 50,000 dead jobs for a text only the 40,124th holds
    first = staff.get(url, {"q": "needle"})
    # Then the first answer looked at the first window only, and links to the next one
    assert first.status_code == 200
    assert big_dead_set.encode() not in first.content
    assert f"jobs 1\u2013{FILTER_SCAN_BUDGET:,}".replace(",", "\u2009").encode() in first.content  # an en dash
    assert f"from={FILTER_SCAN_BUDGET}".encode() in first.content
    # And following "look further" from the right window finds it
    found = staff.get(url, {"q": "needle", "from": 4 * FILTER_SCAN_BUDGET})
    assert big_dead_set.encode() in found.content
    assert f"from={5 * FILTER_SCAN_BUDGET}".encode() not in found.content  # the end of the set


def test_jobs_grep_on_a_big_set_is_bounded_and_says_where_to_go_on(big_dead_set):
    out = io.StringIO()
    call_command("jobs", "dead", "--grep", "needle", stdout=out)
    assert big_dead_set not in out.getvalue()
    assert f"look further with --from {FILTER_SCAN_BUDGET}" in out.getvalue()
    out = io.StringIO()
    call_command("jobs", "dead", "--grep", "needle", "--from", str(4 * FILTER_SCAN_BUDGET), stdout=out)
    assert big_dead_set in out.getvalue()
