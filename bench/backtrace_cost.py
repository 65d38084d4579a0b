"""What a failure's backtrace costs (run by hand): ``.venv/bin/python -m bench.backtrace_cost``.

Times ``jobsapp.worker.retry.with_error_fields`` (the error fields a failed job is filed with)
for an exception raised ``--depth`` calls deep, in interleaved rounds, with the ``backtrace``
option absent (the default: the innermost 20 frames, lines bounded), ``False`` (none) and ``True``
(every frame, as Sidekiq), each frame in a module of its own with a site-packages path, and
prints the time per failure and the bytes of ``error_backtrace`` and of the whole filed payload.
No Redis: the filing itself (one script call) is the same for all.

Options: ``--depth N`` (default 40 frames), ``--failures N`` per round (default 5,000),
``--rounds N`` (default 5).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"


PACKAGES = ["django/db/models", "django/db/backends/postgresql", "rest_framework", "app/imports", "app/services", "jobsapp/worker"]


def _raised(depth: int) -> BaseException:
    """An exception raised through ``depth`` frames, each in its own module and function with
    site-packages-like paths (so the compressed lines are as distinct as a real backtrace's)."""
    namespace: dict = {"__builtins__": __builtins__}
    callee = "None"
    for level in range(depth):
        path = f"/srv/app/.venv/lib/python3.13/site-packages/{PACKAGES[level % len(PACKAGES)]}/module_{level}.py"
        name = f"handle_step_{level}"
        body = "raise KeyError('row 42 is missing')" if level == 0 else f"{callee}()"
        exec(compile("\n" * level + f"def {name}():\n    {body}\n", path, "exec"), namespace)
        callee = name
    try:
        namespace[callee]()
    except KeyError as exc:
        return exc
    raise AssertionError("the chain did not raise")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depth", type=int, default=40)
    parser.add_argument("--failures", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    import django

    django.setup()
    from jobsapp.payload import compact_json, new_jid
    from jobsapp.worker.retry import with_error_fields

    exception = _raised(options.depth)
    base = {"class": "app.jobs.ImportRow", "args": [42], "queue": "default", "jid": new_jid(), "retry": True}
    base |= {"created_at": time.time(), "enqueued_at": time.time()}
    kinds = {
        "backtrace absent (default)": base,
        "backtrace=False": {**base, "backtrace": False},
        "backtrace=True": {**base, "backtrace": True},
    }
    timings: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(options.rounds):
        for name, item in kinds.items():
            started = time.perf_counter()
            for _ in range(options.failures):
                with_error_fields(item, exception, 1.0)
            timings[name].append((time.perf_counter() - started) / options.failures * 1e6)
    rounds = f"{options.failures:,} failures x {options.rounds} interleaved rounds"
    print(f"with_error_fields for an exception {options.depth} calls deep, {rounds}")
    print("\n| backtrace option | µs per failure (median, best) | `error_backtrace` | filed payload |\n|---|---|---|---|")
    for name, item in kinds.items():
        filed = with_error_fields(item, exception, 1.0)
        backtrace_bytes = len(filed.get("error_backtrace", ""))
        print(
            f"| {name} | {statistics.median(timings[name]):.1f}, {min(timings[name]):.1f} | {backtrace_bytes:,} B | "
            f"{len(compact_json(filed).encode()):,} B |"
        )


if __name__ == "__main__":
    main()
