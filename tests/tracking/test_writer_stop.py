"""The recording thread's ``stop(deadline)``: the lifecycle of the engine's components
(``jobsapp.component``), so a worker's shutdown is never held up past its deadline by a batch
that waits for the database."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from tracking import transitions
from tracking.writer import Writer, turn_lock_path

fcntl = pytest.importorskip("fcntl")


@pytest.mark.django_db(transaction=True)
def test_stop_returns_at_its_deadline_while_a_batch_waits_for_the_database():
    if connection.vendor != "sqlite":
        pytest.skip("the writers' turn lock is SQLite's")
    # Given a writer whose batch waits for its turn on the database (another writer holds it)
    writer = Writer(shard=1)
    with open(turn_lock_path(connection.settings_dict["NAME"]), "a+b") as turn:
        fcntl.flock(turn.fileno(), fcntl.LOCK_EX)
        backstop = threading.Timer(8.0, fcntl.flock, (turn.fileno(), fcntl.LOCK_UN))  # a broken stop fails, never hangs
        backstop.start()
        writer.submit(transitions.Change("0" * 24, transitions.START, timezone.now()), wait=False)
        thread = writer._thread
        assert thread is not None
        # When it is stopped with a deadline half a second away
        started = time.monotonic()
        writer.stop(started + 0.5)
        returned_after_seconds = time.monotonic() - started
        still_writing = thread.is_alive()
        backstop.cancel()
        fcntl.flock(turn.fileno(), fcntl.LOCK_UN)
    # Then stop returned at its deadline, not at its cap nor when the batch was written
    assert still_writing
    assert returned_after_seconds < writer.join_seconds / 2
    # And the thread, its turn come, writes the batch and ends on its own
    thread.join(10)
    assert not thread.is_alive()
    assert writer.batches == 1


@pytest.mark.django_db(transaction=True)
def test_the_writers_turn_lock_is_not_left_beside_the_database():
    from pathlib import Path

    if connection.vendor != "sqlite":
        pytest.skip("the writers' turn lock is SQLite's")
    # Given a writer on a SQLite database file
    database = Path(connection.settings_dict["NAME"])
    writer = Writer(shard=1)
    # When it writes a batch (taking its turn on the lock)
    writer.submit(transitions.Change("1" * 24, transitions.START, timezone.now()), wait=True)
    writer.stop(time.monotonic() + 5)
    # Then nothing but the database and SQLite's own files sits beside it (a checkout, a project)
    beside = {path.name for path in database.parent.glob(f"{database.name}*")}
    assert beside <= {database.name, f"{database.name}-journal", f"{database.name}-wal", f"{database.name}-shm"}, beside
    # And the lock is a file of the temporary directory, the same for every process of that database
    lock = Path(turn_lock_path(str(database)))
    assert lock.exists() and lock.parent != database.parent
    assert turn_lock_path(str(database.parent / "." / database.name)) == str(lock)
