"""Job results and retention: sidekiq_options(retain=seconds), jobsapp.results.get, the
Completed page and ``jobs results``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from jobsapp import ending, result_writer, results, scripts, testing
from jobsapp.connection import get_redis
from tests.testapp.jobs import Noop, Record
from tests.testapp.tasks import Add, FailTwice, ReturnsObject
from tests.workers import WorkerProcess, wait_until


def test_a_push_with_retain_records_queued_then_inline_run_records_the_value(redis):
    # Given a job with retain=600, When it is pushed
    jid = Add.perform_async(2, 3)
    # Then its record says queued, with its class, queue and arguments, and lives 600 s
    queued = results.get(jid)
    assert queued is not None and queued.status == "queued" and not queued.ready
    assert (queued.job_class, queued.queue, queued.args) == ("tests.testapp.tasks.Add", "default", [2, 3])
    assert 590 <= redis.ttl(f"jobsapp:result:{jid}") <= 600
    # When it runs (inline, through the server chain as a worker would)
    item = json.loads(redis.lpop("queue:default"))
    testing.execute(item)
    # Then the record holds the value, one attempt and its times, and the Completed index has it
    done = results.get(jid)
    assert done.status == "succeeded" and done.value == 5 and done.has_value and done.attempts == 1
    assert done.started_at <= done.finished_at and done.worker
    assert redis.zscore("jobsapp:results", jid) is not None


def test_a_scheduled_push_is_kept_until_its_run_plus_retain(redis):
    jid = Add.perform_in(3600, 1, 1)
    record = results.get(jid)
    assert record.status == "scheduled" and record.scheduled_at is not None
    assert 4190 <= redis.ttl(f"jobsapp:result:{jid}") <= 4200


def test_without_retain_nothing_is_stored(redis):
    # Given jobs without retain, pushed one by one, in bulk and scheduled, then run
    jid = Noop.perform_async(1)
    Noop.perform_bulk([[1], [2]])
    Record.perform_in(60, "later")
    testing.execute(json.loads(redis.lpop("queue:default")))
    # Then no result key and no index exist
    assert redis.keys("jobsapp:result*") == []
    assert results.get(jid) is None


def test_bulk_push_with_retain_records_every_job(redis):
    jids = Add.perform_bulk([[1, 2], [3, 4]])
    assert [results.get(jid).args for jid in jids] == [[1, 2], [3, 4]]


def test_bad_retain_is_refused_before_any_write(redis):
    with pytest.raises(ValueError, match="retain"):
        Noop.set(retain="forever").perform_async()
    assert redis.keys("*") == []


def test_a_value_that_is_not_json_is_not_kept_but_the_job_succeeded(redis):
    jid = ReturnsObject.perform_async()
    testing.execute(json.loads(redis.lpop("queue:default")))
    record = results.get(jid)
    assert record.status == "succeeded" and not record.has_value and "JSON-native" in record.value_error
    # and the reason speaks of the return value, not of arguments
    assert "return values must be JSON-native" in record.value_error and "arguments" not in record.value_error


def test_a_value_over_the_size_cap_is_not_kept(redis, settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "RESULT_MAX_BYTES": 10}
    jid = Add.perform_async("x" * 20, "y")
    testing.execute(json.loads(redis.lpop("queue:default")))
    assert "RESULT_MAX_BYTES" in results.get(jid).value_error


@pytest.mark.slow
def test_real_worker_records_success_retry_and_failure(redis_server, redis):
    # Given a job that succeeds and one that fails (one retry one second later, then dead)
    good = Add.perform_async(20, 22)
    bad = FailTwice.perform_async("no luck")
    with WorkerProcess(["-P", "2", "-c", "2"], redis_url=redis_server.url) as worker:
        wait_until(lambda: getattr(results.get(good), "ready", False), message="the good job finished")
        retrying = wait_until(lambda: (record := results.get(bad)) and record.status == "retrying" and record)
        wait_until(lambda: results.get(bad).status == "failed", timeout_seconds=15, message="the bad job died")
    # Then the success has its value and the worker that ran it
    record = results.get(good)
    workers = {":".join(identity.split(":")[:2]) for identity in worker.identities}
    assert record.value == 42 and record.worker in workers and len(workers) == 2
    # And the retry was visible with its error and next attempt; the failure has attempts and error
    assert retrying.error_class == "ValueError" and retrying.next_attempt_at is not None
    failed = results.get(bad)
    assert failed.attempts == 2 and failed.error_message == "no luck" and failed.reason
    assert "ValueError: no luck" in failed.error_traceback and failed.finished_at >= failed.started_at
    assert {record.jid for record in __import__("jobsapp").api.CompletedSet().page(1).entries} == {good, bad}


def test_completed_page_and_cli_show_finished_jobs(redis, admin_client):
    # Given one finished retained job with a secret keyword argument
    jid = Add.set(queue="default").perform_async(1, 2)
    testing.execute(json.loads(redis.lpop("queue:default")))
    # When staff open the Completed page
    page = admin_client.get("/jobs/completed/")
    # Then it lists the job with its value
    assert page.status_code == 200 and jid in page.content.decode()
    assert admin_client.get("/jobs/completed/?status=failed").content.decode().count(jid) == 0
    # And the job page of its jid shows the result (200, not "no such job")
    job_page = admin_client.get(f"/jobs/jobs/{jid}/")
    assert job_page.status_code == 200 and "succeeded" in job_page.content.decode()
    assert admin_client.get(f"/jobs/jobs/{'0' * 24}/").status_code == 404
    # And /jobs/metrics counts the retained results
    assert "jobs_results_retained 1.0" in admin_client.get("/jobs/metrics").content.decode()
    # And the CLI lists it and shows it
    out = StringIO()
    call_command("jobs", "results", "--json", stdout=out)
    assert json.loads(out.getvalue())["jobs"][0]["value"] == 3
    out = StringIO()
    call_command("jobs", "results", jid, stdout=out)
    assert "succeeded" in out.getvalue()


def test_completed_page_is_staff_only(client):
    response = client.get("/jobs/completed/")
    assert response.status_code in (302, 403)


def test_a_requeued_job_is_queued_again(redis):
    # Given a retained job whose record says it is not waiting in its queue any more
    jid = Add.perform_async(1, 1)
    item = json.loads(redis.lpop("queue:default"))
    result_writer.recorder.on_retry(item, ValueError("x"), retry_count=0, run_at=0)
    assert results.get(jid).status == "retrying"
    # When the engine puts it back at the front of its queue (shutdown, recovery)
    ending.put_back(item, reason="shutdown")
    # Then its record says queued again
    assert results.get(jid).status == "queued"


def test_finished_records_past_the_cap_are_deleted_soonest_expiring_first(redis, settings):
    # Given a cap of 5 finished records
    settings.JOBSAPP = {**settings.JOBSAPP, "RESULTS_MAX_RECORDS": 5}
    # When 8 retained jobs finish, the first three kept the shortest
    jids = [Add.set(retain=60 + index).perform_async(index, 1) for index in range(8)]
    for _ in jids:
        testing.execute(json.loads(redis.rpop("queue:default")))
    # Then the index holds the 5 that expire last, and the others' records are gone
    assert {member.decode() for member in redis.zrange("jobsapp:results", 0, -1)} == set(jids[3:])
    assert [results.get(jid) for jid in jids[:3]] == [None, None, None]
    assert all(results.get(jid).value == index + 1 for index, jid in enumerate(jids) if index >= 3)


def test_the_writer_clamps_a_ttl_redis_would_refuse(redis):
    # Given a record change with a TTL far past what EXPIRE takes, batched with an ordinary one
    changes = [("a" * 24, 1e300, "finish", {"status": "succeeded"}), ("b" * 24, 60.0, "finish", {"status": "succeeded"})]
    # When the script writes them, Then both are written, the first kept at most the longest TTL
    assert scripts.result_write(get_redis(), now=1.0, changes=changes, ttl_max_seconds=3600, max_records=0) == 2
    assert 0 < redis.ttl("jobsapp:result:" + "a" * 24) <= 3600 and 0 < redis.ttl("jobsapp:result:" + "b" * 24) <= 60
