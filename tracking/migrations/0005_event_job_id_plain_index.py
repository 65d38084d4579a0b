"""PostgreSQL: drop the ``varchar_pattern_ops`` copy of the event's ``job_id`` index.

Django adds one to every unique ``CharField`` for ``LIKE 'prefix%'`` lookups; nothing looks an
event up that way (the unique index serves ``job_id = ...`` and ``IN``), and every event written
(one per job at launch, and each of its updates, which cannot be HOT) paid for it. Nothing on
other databases.
"""

from django.db import migrations


def _like_index(apps, schema_editor) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    event = apps.get_model("tracking", "Event")
    table = event._meta.db_table
    return table, schema_editor._create_index_name(table, ["job_id"], suffix="_like")


def drop(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        _, name = _like_index(apps, schema_editor)
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def create(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        table, name = _like_index(apps, schema_editor)
        quote = schema_editor.quote_name
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {quote(table)} (job_id varchar_pattern_ops)")


class Migration(migrations.Migration):
    dependencies = [("tracking", "0004_apply_batch_function")]

    operations = [migrations.RunPython(drop, create, elidable=False)]
