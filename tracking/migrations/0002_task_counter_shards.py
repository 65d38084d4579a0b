"""Task counts move off the task row into TaskCounter shards (see tracking/models.py): each
existing task's counts become its shard 0, then the task's count columns go."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


COUNTS = ("enqueue", "working", "finish", "failed", "error", "settled")


def counts_to_shards(apps, schema_editor):
    Task = apps.get_model("tracking", "Task")
    TaskCounter = apps.get_model("tracking", "TaskCounter")
    rows = Task.objects.values_list("pk", "revision", "updated_at", *(f"{name}_count" for name in COUNTS))
    TaskCounter.objects.bulk_create(
        [
            TaskCounter(task_id=pk, shard=0, changes=0, updated_at=updated_at, **dict(zip(COUNTS, counts, strict=True)))
            for pk, revision, updated_at, *counts in rows.iterator()
        ],
        batch_size=500,
    )


def shards_to_counts(apps, schema_editor):
    Task = apps.get_model("tracking", "Task")
    TaskCounter = apps.get_model("tracking", "TaskCounter")
    for task in Task.objects.all().iterator():
        sums = TaskCounter.objects.filter(task_id=task.pk).aggregate(**{name: models.Sum(name) for name in (*COUNTS, "changes")})
        for name in COUNTS:
            setattr(task, f"{name}_count", sums[name] or 0)
        task.revision += sums["changes"] or 0
        task.save()


class Migration(migrations.Migration):
    dependencies = [
        ("tracking", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="TaskCounter",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("shard", models.PositiveSmallIntegerField()),
                ("enqueue", models.BigIntegerField(default=0)),
                ("working", models.BigIntegerField(default=0)),
                ("finish", models.BigIntegerField(default=0)),
                ("failed", models.BigIntegerField(default=0)),
                ("error", models.BigIntegerField(default=0)),
                ("settled", models.BigIntegerField(default=0, help_text="Events that will not change again.")),
                ("changes", models.BigIntegerField(default=0, help_text="Event changes counted here (part of the ETag).")),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "task",
                    models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="counters", to="tracking.task"
                    ),
                ),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("task", "shard"), name="tracking_counter_task_shard")],
            },
        ),
        migrations.RunPython(counts_to_shards, shards_to_counts),
        migrations.RemoveField(
            model_name="task",
            name="enqueue_count",
        ),
        migrations.RemoveField(
            model_name="task",
            name="error_count",
        ),
        migrations.RemoveField(
            model_name="task",
            name="failed_count",
        ),
        migrations.RemoveField(
            model_name="task",
            name="finish_count",
        ),
        migrations.RemoveField(
            model_name="task",
            name="settled_count",
        ),
        migrations.RemoveField(
            model_name="task",
            name="working_count",
        ),
        migrations.AlterField(
            model_name="task",
            name="revision",
            field=models.PositiveBigIntegerField(default=0, help_text="Changes of this row (total, finish)."),
        ),
    ]
