"""The named vocabularies (jobsapp.outcomes): wire values unchanged, every reason readable."""

import json

from jobsapp.outcomes import DeadReason, OutcomeKind, RequeueReason
from tracking.middleware import DEAD_REASONS


def test_every_dead_reason_has_a_tracking_message():
    # Given every reason the engine can give on_dead
    # When tracking looks up the message of each
    missing = [reason for reason in DeadReason if reason not in DEAD_REASONS]
    # Then none falls back to the generic "not run again: <reason>"
    assert missing == []


def test_members_are_their_wire_strings():
    # Given members of each vocabulary
    members = [OutcomeKind.DISCARDED, DeadReason.KILLED, DeadReason.RETRIES_EXHAUSTED, RequeueReason.OVER_LIMIT]
    # When they are formatted, JSON-encoded and compared as hooks compare them
    # Then each is exactly the plain string it replaced
    assert [f"{member}" for member in members] == ["discarded", "killed", "retries_exhausted", "over_limit"]
    assert json.dumps(members) == '["discarded", "killed", "retries_exhausted", "over_limit"]'
    assert DeadReason.POISON == "poison"
    assert str(RequeueReason.RECOVERED) == "recovered"
