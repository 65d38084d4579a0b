"""The dashboard's Batches pages and ``jobs batch`` / ``jobs batches``, read through
``jobsapp.api.BatchSet``: counts, callbacks' state, failed and pending jids; staff only,
escaped, and an expired batch leaves the list."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from jobsapp import api, batch, keys
from jobsapp.batch import Batch
from jobsapp.connection import get_redis
from tests.testapp.jobs import BatchComplete, BatchMember, BatchSuccess


def run_next(redis, *, succeeded: bool = True) -> str:
    """Take the oldest queued job and count its run as a worker would (without running it: the
    processor closes the test database's connection)."""
    item = json.loads(redis.rpop("queue:default"))
    batch.job_finished(get_redis(), item, succeeded=succeeded)
    return item["jid"]


@pytest.fixture
def half_run_batch(redis):
    """A batch of four jobs (description with markup): one succeeded, one failed (in retry),
    two still queued; on_complete waits, on_success too."""
    nightly = Batch(on_complete=BatchComplete, on_success=BatchSuccess, description="<script>alert(1)</script> nightly")
    with nightly.jobs():
        BatchMember.perform_async("ok")
        BatchMember.perform_async("flaky", fail=True)
        queued = [BatchMember.perform_async(name) for name in ("later-1", "later-2")]
    # (LPUSH/RPOP: the first pushed runs first)
    run_next(redis)
    failed = run_next(redis, succeeded=False)
    return nightly, failed, queued


@pytest.mark.django_db
def test_the_batch_pages_show_counts_callbacks_failed_and_pending_jids(admin_client, half_run_batch):
    batch, failed, queued = half_run_batch
    # When staff open the Batches page and the batch's page
    listing = admin_client.get(reverse("jobsapp:batches"))
    page = admin_client.get(reverse("jobsapp:batch", args=[batch.bid]))
    # Then the list shows the batch with its counts, its description escaped
    body = listing.content.decode()
    assert listing.status_code == 200 and batch.bid in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt; nightly" in body and "<script>alert(1)" not in body
    row = body[body.index(f'data-bid="{batch.bid}"') :]
    row = row[: row.index("</tr>")]
    assert [cell.split("<")[0] for cell in row.split('<td class="num">')[1:]] == ["4", "2", "1", "1"]
    # and the batch's page lists the failed jid, the two pending ones and the callbacks waiting
    detail = page.content.decode()
    assert page.status_code == 200
    assert failed in detail[detail.index('data-list="failed"') : detail.index('data-list="pending"')]
    pending = detail[detail.index('data-list="pending"') :]
    assert all(jid in pending for jid in queued) and failed not in pending
    assert "on_complete" in detail and detail.count("<td>waiting</td>") == 2
    # and an unknown batch is a 404
    assert admin_client.get(reverse("jobsapp:batch", args=["0" * 16])).status_code == 404


@pytest.mark.django_db
def test_callbacks_show_fired_once_every_job_ran(admin_client, redis, half_run_batch):
    batch, _, _ = half_run_batch
    # When the two queued jobs run (the failed one stays failed)
    run_next(redis)
    run_next(redis)
    # Then on_complete fired and on_success did not (a job's last run failed)
    summary = api.BatchSet.get(batch.bid)
    assert summary is not None and summary.complete and not summary.success
    assert {callback.kind: callback.state for callback in summary.callbacks} == {"complete": "fired", "success": "held by failures"}
    assert summary.pending_jobs == []
    assert "<td>fired</td>" in admin_client.get(reverse("jobsapp:batch", args=[batch.bid])).content.decode()


@pytest.mark.django_db
def test_the_batch_pages_are_staff_only(client, django_user_model, half_run_batch):
    batch, _, _ = half_run_batch
    member = Client()
    member.force_login(django_user_model.objects.create_user("member", password="pw-member-123"))
    for url in (reverse("jobsapp:batches"), reverse("jobsapp:batch", args=[batch.bid])):
        assert member.get(url).status_code == 403
        assert client.get(url).status_code == 302  # anonymous: to the login page
        assert member.post(url).status_code == 403


def test_an_expired_batch_leaves_the_list_and_the_cli_shows_the_same(redis, half_run_batch):
    batch, failed, queued = half_run_batch
    # Given a second batch whose keys expired (its hash is gone, its index entry is not)
    gone = Batch(description="gone")
    with gone.jobs():
        pass
    redis.delete(keys.batch(gone.bid))
    # When the batches are listed through the API and the CLI
    page = api.BatchSet.page(1, 25)
    as_json = StringIO()
    call_command("jobs", "batch", batch.bid, "--json", stdout=as_json)
    listing = StringIO()
    call_command("jobs", "batches", "--json", stdout=listing)
    # Then the expired one is gone from the list (and from the index), the live one is listed
    assert [entry.bid for entry in page.entries] == [batch.bid] and page.total == 1
    assert redis.zscore(keys.BATCHES, gone.bid) is None
    assert [entry["bid"] for entry in json.loads(listing.getvalue())] == [batch.bid]
    # and the CLI shows the batch's failed and pending jids and its callbacks' state
    shown = json.loads(as_json.getvalue())
    assert shown["failed_jids"] == [failed] and sorted(shown["pending_jids"]) == sorted(queued)
    assert shown["callbacks"]["on_complete"]["state"] == "waiting"
