"""PostgreSQL's one-round-trip batches (``tracking.single_trip``): the same outcome, change by
change, as the path that reads the events first; counts equal to what the events say; messages
capped; the task finished once its last event settles."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.tracking.jobs import Succeeds
from tracking import launching, recorder, single_trip, transitions
from tracking.models import Event, Task

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="tracking.single_trip is PostgreSQL's path"),
    pytest.mark.django_db(transaction=True),
]

#: Every transition that path takes.
RUN = [
    transitions.START,
    transitions.FINISHED,
    transitions.FAILED_ON_PURPOSE,
    transitions.CRASHED,
    transitions.RETRY_SCHEDULED,
    transitions.DEAD,
    transitions.CANCEL,
]


def event_states(task: Task) -> list[tuple]:
    return list(Event.objects.filter(task=task).order_by("id").values_list("status", "is_final", "attempts", "revision", "messages"))


def test_the_path_takes_a_jobs_run_and_the_engines_decisions_only():
    now = timezone.now()
    # Given batches of a job's run and the engine's decisions, then of the other transitions
    assert single_trip.open_statuses([transitions.Change("a", transition, now) for transition in RUN]) == ["enqueue", "error", "working"]
    for other in (transitions.MESSAGES_ONLY, transitions.REQUEUED, transitions.REOPENED):
        # Then any of the others sends the batch to the two-trip path
        assert single_trip.open_statuses([transitions.Change("a", transitions.START, now), transitions.Change("b", other, now)]) is None


def test_a_batch_applies_what_the_reading_path_would_and_counts_it(redis):
    # Given a task of four jobs: one waiting, one running, one finished, and one never recorded
    task = Task.objects.launch(Succeeds, [["a"], ["b"], ["c"]])
    waiting, running, finished = Event.objects.filter(task=task).order_by("id").values_list("job_id", flat=True)
    now = timezone.now()
    launching.apply([transitions.Change(running, transitions.START, now), transitions.Change(finished, transitions.FINISHED, now)])
    assert single_trip.available()
    # When one batch runs the first, crashes the second, finishes the third again (a late
    # duplicate) and records a start for a job it does not know (no payload: nothing to record)
    batch = [
        transitions.Change(waiting, transitions.START, now, item={"task_id": task.pk}),
        transitions.Change(waiting, transitions.FINISHED, now, message="done"),
        transitions.Change(waiting, transitions.FINISHED, now),
        transitions.Change(running, transitions.CRASHED, now, message="ValueError: boom"),
        transitions.Change(finished, transitions.FINISHED, now),
        transitions.Change("f" * 24, transitions.START, now),
    ]
    written = single_trip.write(batch, 3, single_trip.open_statuses(batch) or [])
    # Then each change did what it would on the reading path, and the counts match the events
    assert written.results == [True, True, False, True, False, False] and written.leftover == []
    assert written.complete == []  # the crashed job is not settled yet
    task.refresh_from_db()
    assert task.counts == {"enqueue": 0, "working": 0, "finish": 2, "failed": 0, "error": 1, "cancelled": 0} and task.settled_count == 2
    assert task.started_at is not None
    first = Event.objects.get(job_id=waiting)
    assert (first.status, first.is_final, first.attempts, first.revision) == ("finish", True, 1, 2)
    assert [(entry["status"], entry["message"]) for entry in first.messages] == [("finish", "done")]
    assert Event.objects.get(job_id=running).messages[-1]["message"] == "ValueError: boom"
    # And when the crashed job is dead, the batch finds the task complete after its commit
    dead = [transitions.Change(running, transitions.DEAD, now + timedelta(seconds=1), message="retries exhausted")]
    written = single_trip.write(dead, 3, single_trip.open_statuses(dead) or [])
    assert [progress.task_id for progress in written.complete] == [task.pk]
    assert launching.apply(dead) == [False]  # through apply: a duplicate, which finishes the task
    task.refresh_from_db()
    assert task.status == "finished" and task.counts["error"] == 1


def test_messages_keep_the_first_and_the_newest(redis):
    # Given a running job whose event holds as many messages as it may keep, less one
    task = Task.objects.launch(Succeeds, [["a"]])
    job_id = Event.objects.get(task=task).job_id
    now = timezone.now()
    entries = [transitions.message_entry("working", f"row {number}", at=now) for number in range(transitions.MAX_MESSAGES - 1)]
    launching.apply([transitions.Change(job_id, transitions.START, now, entries=entries)])
    # When its end brings three more
    more = [transitions.message_entry("working", f"late {number}", at=now) for number in range(2)]
    batch = [transitions.Change(job_id, transitions.FINISHED, now, message="done", entries=more)]
    assert launching.apply(batch) == [True]
    # Then it keeps the first and the newest, MAX_MESSAGES in all, as transitions.capped does
    messages = [entry["message"] for entry in Event.objects.get(job_id=job_id).messages]
    assert len(messages) == transitions.MAX_MESSAGES
    everything = [entry["message"] for entry in [*entries, *more]] + ["done"]
    assert messages == transitions.capped(everything)
    assert messages[0] == "row 0" and messages[1] == "row 3" and messages[-3:] == ["late 0", "late 1", "done"]


def test_random_batches_end_as_on_the_reading_path(redis):
    # Given two tasks of the same twelve jobs' events, in the same states
    rng = random.Random(20261124)
    left = Task.objects.launch(Succeeds, [[number] for number in range(12)])
    right = Task.objects.launch(Succeeds, [[number] for number in range(12)])
    pairs = list(
        zip(
            Event.objects.filter(task=left).order_by("id").values_list("job_id", flat=True),
            Event.objects.filter(task=right).order_by("id").values_list("job_id", flat=True),
            strict=True,
        )
    )
    now = timezone.now()
    for round_number in range(30):
        # When the same random batch of runs, retries and deaths goes through each path
        moment = now + timedelta(seconds=round_number)
        picks = [(rng.choice(pairs), rng.choice(RUN), rng.choice([None, "note"])) for _ in range(rng.randint(1, 10))]
        ours = [transitions.Change(a, transition, moment, message=message) for (a, _), transition, message in picks]
        theirs = [transitions.Change(b, transition, moment, message=message) for (_, b), transition, message in picks]
        written = single_trip.write(ours, 1 + round_number % 3, single_trip.open_statuses(ours) or [])
        expected = launching._apply_in_transaction(theirs, 1 + round_number % 3)
        # Then every change has the same result, and the events and counts end the same
        assert written.results == expected
        assert event_states(left) == event_states(right)
    left.refresh_from_db()
    right.refresh_from_db()
    assert left.counts == right.counts == recorder_counts(left)
    assert left.settled_count == right.settled_count


def recorder_counts(task: Task) -> dict[str, int]:
    statuses = list(Event.objects.filter(task=task).values_list("status", flat=True))
    return {status: statuses.count(status) for status in ("enqueue", "working", "finish", "failed", "error", "cancelled")}


def test_a_missing_event_is_left_to_the_slower_path(redis):
    # Given a tracked job pushed without the client middleware: no event yet
    item = {"class": Succeeds.wire_name(), "args": ["x"], "jid": "b1b2c3d4e5f6a1b2c3d4e5f6", "queue": "default", "use_task_event": True}
    batch = [transitions.Change(item["jid"], transitions.START, timezone.now(), item=item)]
    # When this path meets it, it leaves it to the caller; apply then records it the slower way
    written = single_trip.write(batch, 1, single_trip.open_statuses(batch) or [])
    assert written.leftover == [0] and not Event.objects.filter(job_id=item["jid"]).exists()
    assert launching.apply(batch) == [True]
    assert Event.objects.get(job_id=item["jid"]).status == "working"
    assert recorder.can_write_committed()


def test_events_are_looked_up_by_job_id_through_one_index():
    # Given the migrated event table
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [Event._meta.db_table])
        definitions = [row[0] for row in cursor.fetchall()]
    # Then its job_id has the unique index only: no pattern-ops copy for LIKE, which every
    # write of an event would pay for (migration 0005)
    assert [definition for definition in definitions if "(job_id" in definition] == [
        definition for definition in definitions if "UNIQUE" in definition and "(job_id)" in definition
    ]
    assert not any("varchar_pattern_ops" in definition for definition in definitions)
