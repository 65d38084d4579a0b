"""A task's ``launching`` count (jobs its background fan-out has still to write and push), and a
partial index on the started, unsettled events (what a task's progress reads while it runs)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tracking", "0006_apply_batch_procedure"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="launching",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("attempts__gt", 0), ("is_final", False)), fields=["task"], name="tracking_event_task_started"
            ),
        ),
    ]
