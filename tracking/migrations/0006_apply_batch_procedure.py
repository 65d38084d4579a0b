"""PostgreSQL: ``tracking_record_batch``, a recording thread's whole batch in one statement (``tracking.single_trip``).

A procedure, called outside any transaction: it applies the batch with ``tracking_apply_batch``
(migration 0004), commits, and then, in a new snapshot, reads the progress of the tasks the
batch settled events of or found final events of (the finish check must follow the commit: of
two batches settling a task's last events, the one that commits last sees them all). It returns
each locked event's state before the batch and those tasks' progress rows, as JSON. One
statement, so no ``BEGIN``/``COMMIT`` round of the client's. Nothing on other databases.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE PROCEDURE tracking_record_batch(
    outcomes json, job_ids json, open_statuses text[], batch_at timestamptz, batch_shard integer, keep_newest integer,
    INOUT states json DEFAULT NULL, INOUT progress json DEFAULT NULL
)
LANGUAGE plpgsql AS $procedure$
DECLARE
    checked text[];
BEGIN
    WITH found AS (
        SELECT * FROM tracking_apply_batch(outcomes, job_ids, open_statuses, batch_at, batch_shard, keep_newest)
    )
    SELECT
        json_agg(json_build_array(f.event_job_id, f.event_task_id, f.event_status, f.event_final)),
        -- the tasks this batch settled events of, or found final events of (a late duplicate)
        array_agg(DISTINCT f.event_task_id) FILTER (
            WHERE f.event_final OR (f.event_status = ANY(open_statuses) AND o.final)
        )
    INTO states, checked
    FROM found f JOIN json_to_recordset(outcomes) AS o (job_id text, final boolean) ON o.job_id = f.event_job_id;
    COMMIT;
    -- recorder.TaskProgress.from_row's columns, as recorder._progress_columns reads them
    SELECT json_agg(json_build_array(
        t.id, t.total, (SELECT COALESCE(SUM(c.settled), 0) FROM tracking_taskcounter c WHERE c.task_id = t.id),
        CASE WHEN t.finished_at IS NULL THEN 1 ELSE 0 END, t.then_class, t.then_queued,
        CASE WHEN t.on_complete_class <> '' OR t.on_success_class <> '' THEN 1 ELSE 0 END
    ))
    INTO progress
    FROM tracking_task t WHERE t.id = ANY(checked) AND t.finished_at IS NULL;
END
$procedure$
"""

DROP = (
    "DROP PROCEDURE IF EXISTS tracking_record_batch(json, json, text[], timestamptz, integer, integer, json, json)"
)


def create(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("tracking", "0005_event_job_id_plain_index")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
