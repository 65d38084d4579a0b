"""The -P supervisor's restart policy in-process, on a manual clock (the forking itself is tested
through real processes: tests/faults/test_s01_sigkill.py and test_s02_forced_exit.py)."""

from __future__ import annotations

from jobsapp.supervisor import MAX_RESTART_DELAY_SECONDS, RESTARTS_PER_MINUTE, Supervisor
from tests.manual_clock import ManualClock


def supervisor_on(clock: ManualClock) -> Supervisor:
    return Supervisor(processes=2, timeout_seconds=25, run_child=lambda slot_number: 0, clock=clock)


def test_a_dead_child_is_restarted_at_once_until_its_slot_crash_loops():
    # Given a supervisor whose slot 0 child dies again and again, a second apart
    clock = ManualClock()
    supervisor = supervisor_on(clock)
    delays = []
    for _ in range(RESTARTS_PER_MINUTE + 5):
        delays.append(supervisor.restart_delay_seconds(0))
        clock.advance(1)
    # Then the first five restarts are at once, the next ones wait 2, 4, 8, 16, 30 s (capped)
    assert delays == [0.0] * RESTARTS_PER_MINUTE + [2.0, 4.0, 8.0, 16.0, MAX_RESTART_DELAY_SECONDS]
    # And another slot is not held up by it
    assert supervisor.restart_delay_seconds(1) == 0.0


def test_a_slot_that_stayed_up_a_minute_is_restarted_at_once_again():
    # Given a slot that crash-looped
    clock = ManualClock()
    supervisor = supervisor_on(clock)
    for _ in range(RESTARTS_PER_MINUTE + 1):
        supervisor.restart_delay_seconds(0)
    # When its child then runs for over a minute before dying, Then it is restarted at once
    clock.advance(61)
    assert supervisor.restart_delay_seconds(0) == 0.0
