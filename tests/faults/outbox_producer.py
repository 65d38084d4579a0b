"""A web process's work for the outbox scenarios, as a process of its own that can be killed:

    python -m tests.faults.outbox_producer <prefix> <count> [commit|rollback|big] [pause_seconds]

Each of ``count`` transactions writes a business row (a ``User`` named ``<prefix>-<i>``: the order
a request saves) and pushes ``LedgerJob("<prefix>-<i>")`` inside it, as a view does; ``rollback``
raises at the end of each block instead; ``big`` gives every odd job a 2 MB payload (an extra
option, which rides in the payload untouched). It prints one line per transaction: ``committed <i>``
once the block returned normally, ``rolled back <i>``, or ``raised <i> <error>`` when the block
raised out (what a request would answer as an error). Settings come from the environment
(``DJANGO_SETTINGS_MODULE``, ``DATABASE_URL``, ``REDIS_URL``, ``JOBSAPP_TEST_OVERRIDES``).
"""

from __future__ import annotations

import sys
import time


class Rollback(Exception):
    """Raised on purpose at the end of a block that must roll back."""


def main(prefix: str, count: int, mode: str, pause_seconds: float) -> None:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import transaction

    from tests.faults.jobs import LedgerJob

    for index in range(count):
        name = f"{prefix}-{index}"
        try:
            with transaction.atomic():
                User.objects.create(username=name)
                if mode == "big" and index % 2:
                    LedgerJob.set(padding="x" * 2_000_000).perform_async(name)
                else:
                    LedgerJob.perform_async(name)
                if mode == "rollback":
                    raise Rollback(name)
        except Rollback:
            print(f"rolled back {index}", flush=True)
        except Exception as exc:  # what the request would answer as an error: counted by the test
            print(f"raised {index} {type(exc).__name__}: {exc}", flush=True)
        else:
            print(f"committed {index}", flush=True)
        if pause_seconds:
            time.sleep(pause_seconds)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "commit", float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
