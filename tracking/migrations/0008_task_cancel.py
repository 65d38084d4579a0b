"""Cancelled tasks and jobs: ``Task.cancelled_at``, the ``cancelled`` event status and its counter
column, and (PostgreSQL) ``tracking_apply_batch`` counting that status too.

The function is migration 0004's with the ``cancelled`` column added to its counter upsert, so a
batch that cancels events moves their counts in the same statement as any other; going back
restores 0004's. Nothing else changes on other databases than the two columns.
"""

import importlib

from django.db import migrations, models

_PREVIOUS = importlib.import_module("tracking.migrations.0004_apply_batch_function")

CREATE = (
    _PREVIOUS.CREATE.replace(
        "(task_id, shard, enqueue, working, finish, failed, error, settled, changes, updated_at)",
        "(task_id, shard, enqueue, working, finish, failed, error, cancelled, settled, changes, updated_at)",
    )
    .replace(
        "            SUM((a.status = 'error')::integer - (a.was = 'error')::integer),\n",
        "            SUM((a.status = 'error')::integer - (a.was = 'error')::integer),\n"
        "            SUM((a.status = 'cancelled')::integer - (a.was = 'cancelled')::integer),\n",
    )
    .replace(
        "            error = c.error + excluded.error,\n",
        "            error = c.error + excluded.error,\n            cancelled = c.cancelled + excluded.cancelled,\n",
    )
)
if CREATE.count("cancelled") != 6:  # each replacement above found its line
    raise RuntimeError("migration 0004's function text changed: update migration 0007's replacements")


def create(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def restore(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_PREVIOUS.CREATE)


class Migration(migrations.Migration):
    dependencies = [("tracking", "0007_task_launching")]

    operations = [
        migrations.AddField(model_name="task", name="cancelled_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.AddField(model_name="taskcounter", name="cancelled", field=models.BigIntegerField(default=0)),
        migrations.AlterField(
            model_name="event",
            name="status",
            field=models.CharField(
                choices=[
                    ("enqueue", "enqueue"),
                    ("working", "working"),
                    ("finish", "finish"),
                    ("failed", "failed"),
                    ("error", "error"),
                    ("cancelled", "cancelled"),
                ],
                default="enqueue",
                max_length=16,
            ),
        ),
        migrations.RunPython(create, restore, elidable=False),
    ]
