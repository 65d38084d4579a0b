"""``python -m jobsapp SUBCOMMAND ...``: the ``jobs`` command, started for less.

``manage.py jobs`` pays Django's whole start-up before it reads a counter: every installed app
and its models imported, ``LOGGING`` configured, each app's ``ready()`` (jobsapp's imports every
``jobs.py``): most of a call's time, paid again by a script that calls it in a loop. The read
subcommands need only the settings (where Redis is) and ``jobsapp.api``, which imports nothing of
Django's app registry; this entry point runs them on the settings alone
(``subcommands.runs_on_settings_alone`` names them), without Django's management machinery
either (``subcommands.run_on_settings_alone``). Any other subcommand (what writes, ``periodic``,
which needs the periodic jobs ``ready()`` discovers), and a call for the help, gets the full
``django.setup()`` and the Django command, so every subcommand works here as it does under
``manage.py``, with the same options and output.

The settings come from ``DJANGO_SETTINGS_MODULE`` or ``--settings``, the project's directory from
the current one (``python -m`` puts it on ``sys.path``) or ``--pythonpath``, as for
``django-admin``. Runs in the caller's process, one call; no Redis key of its own.
"""

from __future__ import annotations

import argparse
import os
import sys

import django
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from jobsapp.management.subcommands import run_on_settings_alone, runs_on_settings_alone

PROGRAM = "python -m jobsapp"


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else list(argv)
    # --settings and --pythonpath first, wherever they are: they say where the project is (as
    # django-admin applies them)
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--settings")
    parser.add_argument("--pythonpath")
    known, _ = parser.parse_known_args(arguments)
    if known.settings:
        os.environ["DJANGO_SETTINGS_MODULE"] = known.settings
    if known.pythonpath:
        sys.path.insert(0, known.pythonpath)
    try:
        settings.INSTALLED_APPS  # noqa: B018  # reads the settings module: a missing one is said now
    except ImproperlyConfigured as error:
        sys.stderr.write(f"{PROGRAM}: {error}\n")
        raise SystemExit(2) from None
    if runs_on_settings_alone(arguments):
        status = run_on_settings_alone(PROGRAM, arguments)
        if status:
            raise SystemExit(status)
        return
    django.setup()
    # Imported here, past the reads: Django's management machinery is a fifth of a read's start-up.
    from jobsapp.management.commands.jobs import Command

    Command().run_from_argv([PROGRAM, "jobs", *arguments])


if __name__ == "__main__":
    main()
