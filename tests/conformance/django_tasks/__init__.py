"""Django's own ``tests/tasks/`` (see UPSTREAM.md), run on ``JobsBackend`` with a real worker."""
