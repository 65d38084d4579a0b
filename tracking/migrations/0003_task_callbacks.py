"""Batch callbacks: the task's on_complete / on_success job classes and whether each has fired."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tracking", "0002_task_counter_shards")]

    operations = [
        migrations.AddField(model_name="task", name="on_complete_class", field=models.CharField(blank=True, default="", max_length=255)),
        migrations.AddField(model_name="task", name="on_success_class", field=models.CharField(blank=True, default="", max_length=255)),
        migrations.AddField(model_name="task", name="complete_fired", field=models.BooleanField(default=False)),
        migrations.AddField(model_name="task", name="success_fired", field=models.BooleanField(default=False)),
    ]
