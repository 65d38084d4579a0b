"""The three use cases end to end: launched here, run by a real ``manage.py runworkers`` process
(10 threads) on the test Redis and the same test database (a file on SQLite, or PostgreSQL),
followed through the API a frontend polls."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from fixtures import usecases
from fixtures.jobs import products
from fixtures.models import Customer, PromotionEntry
from tests.tracking.conftest import CLIENT, SERVER
from tests.workers import WorkerProcess, wait_until, worker_database_url
from tracking.models import Event, Task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def worker(transactional_db, redis_server) -> Iterator[WorkerProcess]:
    """A worker process with the tracking middleware, on the test database and Redis."""
    env = {
        "DATABASE_URL": worker_database_url(),
        "JOBSAPP_TEST_OVERRIDES": json.dumps({"CLIENT_MIDDLEWARE": [CLIENT], "SERVER_MIDDLEWARE": [SERVER]}),
    }
    with WorkerProcess(["-q", "default", "-c", "10"], env=env, redis_url=redis_server.url) as process:
        yield process


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user("owner")


def wait_finished(task: Task, worker: WorkerProcess, timeout_seconds: float = 40.0) -> Task:
    def finished() -> bool:
        task.refresh_from_db()
        return task.finished_at is not None

    try:
        wait_until(finished, timeout_seconds=timeout_seconds, interval_seconds=0.1, message=f"task {task.name} finished")
    except AssertionError:
        raise AssertionError(f"{task.counts}; worker output:\n{worker.output[-3000:]}") from None
    return task


def summary(owner, task: Task) -> dict:
    client = APIClient()
    client.force_authenticate(owner)
    return client.get(f"/api/tasks/{task.pk}/").json()


def test_promotion_signup_lists_which_products_failed_and_why(worker, owner):
    # Given 12 products: some qualified, some whose seller is not, one out of stock, one whose
    # partner API times out once
    catalogue = products()
    not_qualified = [sku for sku, row in catalogue.items() if float(row["seller_rating"]) < 4.0][:3]
    out_of_stock = [sku for sku, row in catalogue.items() if row["stock"] == "0" and sku not in not_qualified][:1]
    flaky = [sku for sku, row in catalogue.items() if row["flaky"] == "1" and float(row["seller_rating"]) >= 4.0][:1]
    fine = [
        sku
        for sku, row in catalogue.items()
        if sku not in not_qualified + out_of_stock + flaky
        and float(row["seller_rating"]) >= 4.0
        and row["stock"] != "0"
        and row["flaky"] == "0"
    ][:7]
    skus = not_qualified + out_of_stock + flaky + fine
    assert len(skus) == 12
    # When they are signed up as one task
    task = wait_finished(usecases.launch_promotion(owner, promotion="e2e", skus=skus), worker)
    # Then the summary counts 8 signed up and 4 failed, none left
    body = summary(owner, task)
    assert body["status"] == "finished" and body["progress"] == 1.0
    assert body["counts"] == {"enqueue": 0, "working": 0, "finish": 8, "failed": 4, "error": 0, "cancelled": 0}
    assert set(PromotionEntry.objects.values_list("sku", flat=True)) == set(flaky + fine)
    # And the failed events say which product and why
    failed = {row.params["args"][0]: row.messages[-1]["message"] for row in Event.objects.filter(task=task, status="failed")}
    assert set(failed) == set(not_qualified + out_of_stock)
    assert all("not qualified" in failed[sku] for sku in not_qualified)
    assert "out of stock" in failed[out_of_stock[0]]
    # And the job that crashed once went error -> enqueue (retry) -> working -> finish
    retried = Event.objects.get(task=task, params__args__0=flaky[0])
    assert retried.status == "finish" and retried.attempts == 2
    assert [entry["status"] for entry in retried.messages][:2] == ["error", "enqueue"]
    assert retried.messages[1]["message"] == "waiting for retry (1 of 3)"


def test_csv_import_in_chunks_reports_progress_and_bad_rows(worker, owner, tmp_path: Path):
    # Given a 60-row CSV with two bad rows
    source = tmp_path / "customers.csv"
    with source.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name", "country", "signed_up_on"])
        for number in range(1, 61):
            email = "broken-at-example.com" if number == 25 else f"user{number}@example.com"
            writer.writerow([email, "" if number == 47 else f"User {number}", "FR", "2024-02-03"])
    # When it is imported in chunks of 20 rows
    task = usecases.launch_import(owner, path=source, chunk_rows=20)
    assert task.total == 3
    wait_finished(task, worker)
    # Then 58 customers exist, and the events say which rows were rejected
    assert Customer.objects.count() == 58
    assert summary(owner, task)["counts"]["finish"] == 3
    messages = [entry["message"] for row in Event.objects.filter(task=task) for entry in row.messages]
    assert "row 25: invalid email 'broken-at-example.com'" in messages
    assert "row 47: missing name" in messages
    assert "rows 21 to 40: 19 imported, 1 invalid" in messages
    assert any(message == "row 60 of 60" for message in messages)


def test_export_in_parts_is_assembled_into_one_file_at_the_end(worker, owner, tmp_path: Path):
    # When 1,000 orders are exported in parts of 150
    directory = tmp_path / "export"
    task = usecases.launch_export(owner, total_records=1000, part_records=150, directory=directory)
    # Then it launched the 7 parts; the assembly joins only once they settled (the worker may have
    # run them all by the time launch reads its task back)
    assert task.total == 7 or (task.total == 8 and task.then_queued), (task.total, task.then_queued)
    wait_finished(task, worker)
    # Then the assembly job ran last, inside the same task, and wrote one complete file
    assert task.total == 8 and task.counts["finish"] == 8
    lines = (directory / "export.csv").read_text().splitlines()
    assert lines[0].startswith("order_id,") and len(lines) == 1001
    assert [int(line.split(",")[0]) for line in lines[1:]] == list(range(1000))
    assert sorted(path.name for path in directory.iterdir()) == ["export.csv"]
    last = Event.objects.filter(task=task).order_by("-id").first()
    assert last.job_class.endswith("AssembleExport") and "wrote 1,000 orders" in last.messages[-1]["message"]


def test_demo_command_runs_use_case_one_and_prints_the_page_url(worker, settings):
    from io import StringIO

    from django.core.management import call_command

    # When the demo runs against the worker
    output = StringIO()
    call_command("demo", "--timeout", "60", "--base-url", "http://demo.example:8123", stdout=output)
    # Then it followed the 200 sign-ups to the end and printed where to watch them
    text = output.getvalue()
    task = Task.objects.get()
    assert task.total == 200 and task.status == "finished" and task.owner.username == "demo"
    assert task.counts["failed"] > 0 and task.counts["finish"] > 150
    assert f"progress page: http://demo.example:8123/tasks/{task.pk}/" in text
    assert "200/200 settled (100%)" in text and "with password 'demo'" in text


def test_demo_command_refuses_without_the_tracking_middleware(settings):
    from django.core.management import CommandError, call_command

    from jobsapp import middleware

    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": [], "SERVER_MIDDLEWARE": []}
    middleware.reset_chains()
    with pytest.raises(CommandError, match="task tracking is not installed"):
        call_command("demo", "--no-wait")
    assert not Task.objects.exists()
